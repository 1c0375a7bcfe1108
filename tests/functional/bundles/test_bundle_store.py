"""Bundle records: conditional creation and status transitions, on the moto server."""

import itertools
import threading

import pytest

from conftest import AwsStack
from kiln.bundles.errors import BundleStateError
from kiln.bundles.store import BundleStore, zip_key

TARGET = "local-python3.11-x86_64"


@pytest.fixture
def store(aws: AwsStack) -> BundleStore:
    return BundleStore(aws.clients.dynamodb, aws.clients.s3, table=aws.table, bucket=aws.bucket)


def test_ensure_records_a_pending_bundle_once(store: BundleStore) -> None:
    first = store.ensure("python", TARGET, ["humanize==4.*"])
    second = store.ensure("python", TARGET, ["Humanize == 4.*"])
    assert first is not None
    assert second is not None
    assert first.id == second.id
    assert first.status == "pending"
    assert first.requirements == ("humanize==4.*",)
    assert [r.id for r in store.list()] == [first.id]


def test_racing_ensures_leave_one_record(store: BundleStore) -> None:
    results = []
    barrier = threading.Barrier(8)

    def ensure() -> None:
        barrier.wait()
        results.append(store.ensure("python", TARGET, ["six"]))

    threads = [threading.Thread(target=ensure) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len({r.id for r in results if r}) == 1
    assert len(store.list()) == 1


def test_ensure_without_requirements_needs_no_bundle(store: BundleStore) -> None:
    assert store.ensure("python", TARGET, []) is None
    assert store.list() == []


def test_status_moves_pending_building_ready(store: BundleStore) -> None:
    record = store.ensure("python", TARGET, ["six"])
    assert record is not None
    building = store.mark_building(record.id)
    assert building.status == "building"
    assert building.attempts == 1
    assert building.started_at
    manifest = {"zip_size": 10, "unpacked_size": 30, "zip_sha256": "ab" * 32, "file_count": 2}
    ready = store.mark_ready(record.id, {**manifest, "duration_s": 1.25})
    assert ready.status == "ready"
    assert (ready.size, ready.unpacked_size, ready.build_count) == (10, 30, 1)
    assert ready.duration_s == 1.25
    assert store.get(record.id) == ready


def test_only_one_builder_takes_a_pending_bundle(store: BundleStore) -> None:
    record = store.ensure("python", TARGET, ["six"])
    assert record is not None
    store.mark_building(record.id)
    with pytest.raises(BundleStateError, match="is building, not pending"):
        store.mark_building(record.id)


def test_a_failed_bundle_can_be_retried_and_a_ready_one_cannot(store: BundleStore) -> None:
    record = store.ensure("python", TARGET, ["six"])
    assert record is not None
    store.mark_building(record.id)
    failed = store.mark_failed(record.id, "pip install failed", "bundles/x.log")
    assert (failed.status, failed.error, failed.log_key) == (
        "failed",
        "pip install failed",
        "bundles/x.log",
    )
    retried = store.retry(record.id)
    assert retried.status == "pending"
    again = store.mark_building(record.id)
    assert again.attempts == 2
    assert again.error is None
    store.mark_ready(
        record.id, {"zip_size": 1, "unpacked_size": 1, "zip_sha256": "0" * 64, "file_count": 1}
    )
    store.s3.put_object(Bucket=store.bucket, Key=zip_key(record.id), Body=b"PK")
    with pytest.raises(BundleStateError, match="is ready"):
        store.retry(record.id)


def test_a_fresh_build_in_progress_cannot_be_retried(store: BundleStore) -> None:
    record = store.ensure("python", TARGET, ["six"])
    assert record is not None
    store.mark_building(record.id)
    with pytest.raises(BundleStateError, match="is building"):
        store.retry(record.id)


def test_unknown_bundles_are_named_in_the_error(store: BundleStore) -> None:
    assert store.get("0" * 32) is None
    with pytest.raises(BundleStateError, match="does not exist"):
        store.retry("0" * 32)
    with pytest.raises(BundleStateError, match="does not exist"):
        store.mark_building("0" * 32)


def test_an_orphaned_build_is_requeued_only_if_it_is_still_the_same_build(
    store: BundleStore,
) -> None:
    record = store.ensure("python", TARGET, ["six"])
    assert record is not None
    building = store.mark_building(record.id)
    requeued = store.requeue_orphan(building)
    assert requeued.status == "pending"
    assert requeued.started_at is None
    store.mark_building(record.id)
    with pytest.raises(BundleStateError):
        store.requeue_orphan(building)  # a newer build started since


def test_any_unique_prefix_names_a_bundle_and_an_ambiguous_one_says_so(
    store: BundleStore,
) -> None:
    from kiln.bundles.errors import BundleIdError

    records = [store.ensure("python", TARGET, [f"pkg{n}==1.0"]) for n in range(40)]
    ids = sorted(record.id for record in records if record is not None)
    # With 40 ids some share a first hex digit: that digit alone is ambiguous.
    shared = next(a for a, b in itertools.pairwise(ids) if a[0] == b[0])[0]
    with pytest.raises(BundleIdError, match=rf"bundle {shared}: ambiguous, \d+ bundles start"):
        store.resolve(shared)
    unique = ids[0][:12]
    assert store.resolve(unique) == ids[0]
    assert store.resolve(ids[0]) == ids[0]
    with pytest.raises(BundleIdError, match="no bundle id starts with it"):
        store.resolve("ffffffffffff0")
    with pytest.raises(BundleIdError, match="32 lower-case hex digits; any unique prefix"):
        store.resolve("not-hex")


def test_listing_bundles_reads_their_directory_never_the_whole_table(
    store: BundleStore, aws: AwsStack
) -> None:
    """The table holds the call ledger too: a Scan per listing grew with every call made."""
    first = store.ensure("python", TARGET, ["humanize==4.*"])
    store.list()  # a table from before directories is completed once (one Scan) here
    scans: list[object] = []
    aws.clients.dynamodb.meta.events.register(
        "before-call.dynamodb.Scan", lambda **_: scans.append(1)
    )
    second = store.ensure("python", TARGET, ["roman==4.*"])
    assert first is not None
    assert second is not None
    assert {r.id for r in store.list()} == {first.id, second.id}
    assert scans == []
