"""The catalog's change log: a warm process moves forward by reading only what a save changed.

Each test holds a warm snapshot, changes the catalog through another store (another
process), and checks two things: what the warm process read to catch up (by operation and
partition, counted on its own boto3 client), and that what it then holds is exactly what a
fresh process reading the whole catalog holds.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from conftest import AwsStack
from kiln.access.view_store import ViewStore
from kiln.access.views import check_view
from kiln.aws.clients import make_clients
from kiln.catalog import changelog
from kiln.catalog.model import Draft
from kiln.catalog.snapshot import CatalogSnapshots
from kiln.catalog.store import CatalogStore

DRAFT = Draft(name="echo", description="Echo.", language="python", code="print(1)\n")


def _store(aws: AwsStack) -> CatalogStore:
    clients = make_clients(endpoint_url=aws.endpoint_url, region="us-east-1")
    return CatalogStore(clients.dynamodb, clients.s3, table=aws.table, bucket=aws.bucket)


def _reads(store: CatalogStore) -> list[str]:
    """Every read the store's client makes from now on, as `Operation pk`."""
    seen: list[str] = []

    def count(params: dict[str, Any], model: Any, **_: object) -> None:
        key = params.get("Key") or params.get("ExpressionAttributeValues", {})
        pk = (key.get("pk") or key.get(":pk") or {}).get("S", "?")
        seen.append(f"{model.name} {pk}")

    events = store.ddb.meta.events
    for operation in ("GetItem", "Query"):
        events.register(f"provide-client-params.dynamodb.{operation}", count)
    return seen


def _described(snapshots: CatalogSnapshots) -> dict[str, tuple[str, int, bool]]:
    current = snapshots.current()
    return {name: (t.id, t.head.number, t.enabled) for name, t in current.tools.items()}


@pytest.fixture
def warm(aws: AwsStack) -> tuple[CatalogStore, CatalogSnapshots, list[str]]:
    """A second process's warm snapshot of a catalog of 5 tools, and its reads from now on."""
    writer = _store(aws)
    for index in range(5):
        writer.create(replace(DRAFT, name=f"tool_{index}"))
    reader = _store(aws)
    snapshots = CatalogSnapshots(reader)
    snapshots.current()
    return writer, snapshots, _reads(reader)


def test_a_save_costs_a_warm_process_the_log_and_the_changed_tool_not_the_catalog(
    aws: AwsStack, warm: tuple[CatalogStore, CatalogSnapshots, list[str]]
) -> None:
    writer, snapshots, reads = warm
    head = writer.get("tool_3").head.number
    writer.update("tool_3", replace(DRAFT, name="tool_3", code="print(2)\n"),
                  expected_revision=head)  # fmt: skip
    tool_id = writer.get("tool_3").id
    assert _described(snapshots)["tool_3"][1] == head + 1
    assert reads == ["GetItem CATALOG", "Query CATALOG#CHANGES", "GetItem TOOLS"], reads
    assert (snapshots.reloads, snapshots.forwards) == (1, 1)
    entry = aws.clients.dynamodb.query(
        TableName=aws.table, KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues={":pk": {"S": changelog.CHANGES_PK}},
    )["Items"][-1]  # fmt: skip
    assert entry["tools"]["SS"] == [tool_id]
    assert int(entry["expires_at"]["N"]) > 0


def test_every_kind_of_write_moves_a_warm_process_to_what_a_full_read_sees(
    aws: AwsStack, warm: tuple[CatalogStore, CatalogSnapshots, list[str]]
) -> None:
    writer, snapshots, _ = warm
    views = ViewStore(writer.ddb, table=aws.table)
    deleted = writer.get("tool_2").id
    steps: list[Callable[[], object]] = [
        lambda: writer.create(replace(DRAFT, name="fresh")),
        lambda: writer.rename("tool_0", "renamed"),
        lambda: writer.create(replace(DRAFT, name="tool_0")),  # the freed name, a new id
        lambda: writer.set_enabled("tool_1", False),
        lambda: writer.delete("tool_2"),
        lambda: views.put(check_view({"name": "v", "tools": ["fresh"]}), expected_revision=None),
        lambda: writer.undelete(f"id:{deleted}"),
    ]
    for step in steps:
        step()
        assert _described(snapshots) == _described(CatalogSnapshots(_store(aws)))
    assert snapshots.reloads == 1, "every write was read forward, none by a full read"
    assert snapshots.forwards == len(steps)


def test_several_saves_at_once_are_one_forward_read_and_each_gets_its_own_version(
    aws: AwsStack, warm: tuple[CatalogStore, CatalogSnapshots, list[str]]
) -> None:
    writer, snapshots, reads = warm
    before = writer.catalog_version()
    barrier = threading.Barrier(6)
    failures: list[BaseException] = []

    def save(index: int) -> None:
        store = _store(aws)
        barrier.wait()
        try:
            store.create(replace(DRAFT, name=f"burst_{index}"))
        except BaseException as error:
            failures.append(error)

    threads = [threading.Thread(target=save, args=(i,)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert writer.catalog_version() == before + 6  # no two writes took one version
    assert {f"burst_{i}" for i in range(6)} <= set(_described(snapshots))
    assert reads.count("Query CATALOG#CHANGES") == 1
    assert reads.count("GetItem TOOLS") == 6
    assert snapshots.reloads == 1


def test_a_write_the_log_does_not_know_makes_a_full_read(
    aws: AwsStack, warm: tuple[CatalogStore, CatalogSnapshots, list[str]]
) -> None:
    """A version stepped without an entry (an older Kiln's write): the gap is seen."""
    writer, snapshots, reads = warm
    writer.create(replace(DRAFT, name="logged"))
    aws.clients.dynamodb.update_item(
        TableName=aws.table, Key=changelog.VERSION_KEY,
        UpdateExpression="ADD version :one", ExpressionAttributeValues={":one": {"N": "1"}},
    )  # fmt: skip
    assert "logged" in _described(snapshots)
    assert snapshots.reloads == 2
    assert "Query TOOLS" in reads


def test_a_process_far_behind_reads_everything_once(
    aws: AwsStack, warm: tuple[CatalogStore, CatalogSnapshots, list[str]]
) -> None:
    writer, snapshots, reads = warm
    views = ViewStore(writer.ddb, table=aws.table)
    view = check_view({"name": "v", "tools": []})
    revision = views.put(view, expected_revision=None).revision
    for _ in range(changelog.MAX_STEPS):
        revision = views.put(view, expected_revision=revision).revision
    assert _described(snapshots) == _described(CatalogSnapshots(_store(aws)))
    assert reads.count("Query CATALOG#CHANGES") == 0
    assert snapshots.reloads == 2
