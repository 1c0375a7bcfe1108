"""A snapshot carries what its tools' bundles resolved to (catalog/packages.py), and moves
forward when a bundle turns ready or leaves ready to be rebuilt, as it does for a saved tool:
the bundle's move is a catalog write (kiln/bundles/announce.py) whose change-log entry names
it, so a warm process re-reads that one record and nothing else, and never per request."""

from __future__ import annotations

from conftest import AwsStack
from kiln.bundles.resolved import described
from kiln.bundles.store import BundleStore
from kiln.catalog import fingerprint
from kiln.catalog.model import Draft
from kiln.catalog.snapshot import CatalogSnapshots
from kiln.catalog.store import CatalogStore
from support.bundle_records import TARGET, Identify, manifest, snapshot_bundle_reads

WANTED = ("humanize>=4",)
DRAFT = Draft(
    name="human", description="Humanize.", language="python", code="print(1)\n",
    requirements=WANTED,
)  # fmt: skip


def test_a_bundle_turning_ready_or_rebuilt_moves_the_snapshot_forward_by_that_record_alone(
    aws: AwsStack,
) -> None:
    d, s3 = aws.clients.dynamodb, aws.clients.s3
    catalog = CatalogStore(d, s3, table=aws.table, bucket=aws.bucket, bundles=Identify())
    bundles = BundleStore(d, s3, table=aws.table, bucket=aws.bucket)
    saved = catalog.create(DRAFT).head
    record = bundles.ensure("python", TARGET, WANTED)
    assert record is not None
    assert record.id == saved.bundle_id
    snapshots = CatalogSnapshots(catalog)

    with snapshot_bundle_reads(aws.clients.dynamodb) as reads:
        tool = snapshots.current().tools["human"]
    assert reads == [f"BUNDLE#{record.id}"]  # made with the catalog: one read of its bundles
    assert fingerprint.served_tool(tool) is None  # pending: no fingerprint names its versions

    version = catalog.catalog_version()
    bundles.mark_building(record.id)  # still not ready: nothing served changes, no step
    assert catalog.catalog_version() == version

    bundles.mark_ready(record.id, manifest("4.9.0"))
    assert catalog.catalog_version() == version + 1
    first = described("python", manifest("4.9.0")["lock"])["resolved_sha256"]
    with snapshot_bundle_reads(aws.clients.dynamodb) as reads:
        tool = snapshots.current().tools["human"]
        again = snapshots.current().tools["human"]
    assert reads == [f"BUNDLE#{record.id}"]  # moved forward by that record alone
    assert snapshots.reloads == 1, snapshots.reloads
    assert snapshots.forwards == 1, snapshots.forwards
    assert again is tool
    assert fingerprint.served_tool(tool) == fingerprint.of("human", saved, first)

    # Its zip is lost (none was ever stored here): ready -> pending is a catalog write too,
    # and the rebuild resolving to another version another.
    bundles.retry(record.id)
    assert fingerprint.served_tool(snapshots.current().tools["human"]) is None
    bundles.mark_building(record.id)
    bundles.mark_ready(record.id, manifest("4.10.0"))
    second = described("python", manifest("4.10.0")["lock"])["resolved_sha256"]
    rebuilt = snapshots.current().tools["human"]
    assert fingerprint.served_tool(rebuilt) == fingerprint.of("human", saved, second)
    assert fingerprint.served_tool(rebuilt) != fingerprint.served_tool(tool)
    assert rebuilt.head == saved  # the same revision, the same requirements text
    assert snapshots.reloads == 1, snapshots.reloads

    # A process that starts now reads the whole catalog and the same fingerprint.
    fresh = CatalogSnapshots(catalog).current().tools["human"]
    assert fingerprint.served_tool(fresh) == fingerprint.served_tool(rebuilt)
