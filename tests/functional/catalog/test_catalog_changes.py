"""The emulator's write counter lets a process skip its per-request catalog version read.

A process must see a catalog change on its next request, whoever made it. Against the local
emulator, which every write goes through, the version read is skipped while the emulator's
counter shows no write that could move the version; these tests check both halves: reads
are skipped when nothing changed, and a change by another client is still seen at once.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from kiln.aws.clients import AwsClients, ensure_resources, make_clients
from kiln.catalog.model import Draft
from kiln.catalog.snapshot import CatalogSnapshots
from kiln.catalog.store import CatalogStore
from kiln.local.emulator import Endpoint, run_emulator
from kiln.local.emulator.changes import ChangeMark

DRAFT = Draft(name="echo", description="Echo.", language="python", code="print(1)\n")


@pytest.fixture(scope="module")
def emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Endpoint]:
    with run_emulator(tmp_path_factory.mktemp("changes") / "aws") as endpoint:
        yield endpoint


def _clients(endpoint: Endpoint) -> AwsClients:
    keys = (endpoint.credentials.access_key_id, endpoint.credentials.secret_access_key)
    return make_clients(endpoint_url=endpoint.url, region=endpoint.region, credentials=keys)


@pytest.fixture
def table(emulator: Endpoint) -> str:
    name = f"kiln-changes-{uuid.uuid4().hex[:8]}"
    ensure_resources(_clients(emulator), table=name, bucket=name)
    return name


def _mark(endpoint: Endpoint) -> ChangeMark:
    assert endpoint.changes is not None
    return ChangeMark(endpoint.changes)


def _version_reads(clients: AwsClients) -> list[str]:
    reads: list[str] = []

    def count(params: dict[str, object], **_: object) -> None:
        key = params.get("Key")
        if isinstance(key, dict) and key.get("sk") == {"S": "VERSION"}:
            reads.append("version")

    clients.dynamodb.meta.events.register("before-parameter-build.dynamodb.GetItem", count)
    return reads


def test_the_counter_moves_on_catalog_writes_and_table_changes_only(
    emulator: Endpoint, table: str
) -> None:
    clients = _clients(emulator)
    mark = _mark(emulator)
    store = CatalogStore(clients.dynamodb, clients.s3, table=table, bucket=table)
    before = mark()
    assert before is not None

    store.catalog_version()
    clients.dynamodb.put_item(TableName=table, Item={"pk": {"S": "LEDGER"}, "sk": {"S": "call-1"}})
    assert mark() == before  # a read, and an item write that does not name the version

    store.create(DRAFT)
    after_save = mark()
    assert after_save != before

    ensure_resources(clients, table=f"{table}-2", bucket=table)
    assert mark() != after_save  # a new table: counted whatever it holds


def test_a_process_skips_the_version_read_until_another_client_changes_the_catalog(
    emulator: Endpoint, table: str
) -> None:
    reader = replace(_clients(emulator), catalog_changes=_mark(emulator))
    writer = _clients(emulator)
    reads = _version_reads(reader)
    view = CatalogSnapshots(
        CatalogStore(reader.dynamodb, reader.s3, table=table, bucket=table),
        changes=reader.catalog_changes,
    )

    async def three_requests() -> list[set[str]]:
        return [set((await view.fresh()).tools) for _ in range(3)]

    assert asyncio.run(three_requests()) == [set()] * 3
    assert reads == ["version"]  # the first request read; the next two trusted the counter

    CatalogStore(writer.dynamodb, writer.s3, table=table, bucket=table).create(DRAFT)
    assert asyncio.run(three_requests()) == [{"echo"}] * 3
    assert reads == ["version", "version"]


def test_without_a_counter_file_every_request_reads_the_version(
    emulator: Endpoint, table: str, tmp_path: Path
) -> None:
    reader = replace(_clients(emulator), catalog_changes=ChangeMark(tmp_path / "missing"))
    reads = _version_reads(reader)
    view = CatalogSnapshots(
        CatalogStore(reader.dynamodb, reader.s3, table=table, bucket=table),
        changes=reader.catalog_changes,
    )

    async def three_requests() -> None:
        for _ in range(3):
            await view.fresh()

    asyncio.run(three_requests())
    assert reads == ["version"] * 3
