"""At most one catalog-version read per request, and at most one per staleness window.

`CATALOG|VERSION` is one DynamoDB item: 3,000 reads a second at most. Every request of every
container reads it unless a window is set (the Lambda functions: 1 s), and a view's path
must not read it twice.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import AwsStack
from kiln.access.views import check_view
from kiln.catalog.rules import check_draft
from kiln.catalog.snapshot import CatalogSnapshots
from kiln.catalog.store import CatalogStore
from kiln.settings import Settings
from support.app import AUTHOR_KEY, RunningKiln, serve
from support.iam_roles import call_log, read_new


def count_version_reads(dynamodb: Any) -> list[str]:
    reads: list[str] = []

    def count(params: dict[str, Any], **_: object) -> None:
        if params.get("Key", {}).get("pk", {}).get("S") == "CATALOG":
            reads.append("version")

    dynamodb.meta.events.register("before-parameter-build.dynamodb.GetItem", count)
    return reads


def version_reads(records: list[dict[str, Any]], table: str) -> list[str]:
    """The catalog-version reads of `table` among the emulator's call-log records."""
    return [
        "version"
        for record in records
        if record.get("target") == "GetItem"
        and (record.get("body") or {}).get("TableName") == table
        and (record.get("body") or {}).get("Key", {}).get("pk") == {"S": "CATALOG"}
    ]


class Clock:
    now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_version_read_serves_the_requests_of_its_window_then_is_made_again(
    aws: AwsStack,
) -> None:
    store = CatalogStore(aws.clients.dynamodb, aws.clients.s3, table=aws.table, bucket=aws.bucket)
    clock = Clock()
    snapshots = CatalogSnapshots(store, max_staleness_s=1.0, clock=clock)
    reads = count_version_reads(aws.clients.dynamodb)

    async def requests(count: int) -> None:
        for _ in range(count):
            await snapshots.fresh()
            clock.now += 0.09

    asyncio.run(requests(10))  # 0.9 s of requests: one read
    assert reads == ["version"]
    clock.now += 0.2
    asyncio.run(requests(1))
    assert reads == ["version", "version"]


def test_without_a_window_every_request_reads_the_version(aws: AwsStack) -> None:
    store = CatalogStore(aws.clients.dynamodb, aws.clients.s3, table=aws.table, bucket=aws.bucket)
    snapshots = CatalogSnapshots(store)
    reads = count_version_reads(aws.clients.dynamodb)

    async def requests() -> None:
        for _ in range(3):
            await snapshots.fresh()

    asyncio.run(requests())
    assert reads == ["version"] * 3


@pytest.fixture
def kiln(aws: AwsStack, tmp_path: Path) -> Iterator[RunningKiln]:
    settings = Settings(
        table=aws.table, bucket=aws.bucket, endpoint_url=aws.endpoint_url, region="us-east-1",
        author_key=AUTHOR_KEY, bundle_cache_dir=tmp_path, bind_host="127.0.0.1",
    )  # fmt: skip
    yield from serve(settings, aws, public_only=True)


def test_a_call_through_a_view_reads_the_catalog_version_once(
    kiln: RunningKiln, aws: AwsStack
) -> None:
    tool = {"name": "hello", "description": "d", "language": "python", "code": "print('hi')\n"}
    kiln.kiln.store.create(check_draft(tool), actor="test")
    view = {"name": "greet", "tools": ["hello"], "published": True, "anonymous": True}
    kiln.kiln.views.store.put(check_view(view), expected_revision=None)
    log = call_log()
    start = log.stat().st_size
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "hello", "arguments": {}}}  # fmt: skip
    answer = kiln.mcp(call, path="/mcp/v/greet")
    assert answer.status_code == 200, answer.text
    assert "hi" in answer.text, answer.text
    # counted at the emulator: the app reads the version without its client (kiln.aws.items)
    assert version_reads(read_new(log, start)[0], aws.table) == ["version"]
