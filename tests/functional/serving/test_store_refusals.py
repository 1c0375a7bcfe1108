"""A call whose ledger entry or quota claim DynamoDB refuses (a throttled partition) gets an
error that says so, not "Catalog unavailable".

The emulator applies DynamoDB's per-partition limits (`--partition-limits`), here with a
window of a day and a small write budget, so that one partition can be spent by the test
(a few 390 KB items) and stays spent while the call is made; every other partition keeps
its budget. The app is the public function's, served over HTTP, with the ledger in one
shard (`KILN_LEDGER_SHARDS=1`) so that the test knows its partition.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from kiln.access.views import check_view
from kiln.aws.clients import ensure_resources, make_clients
from kiln.catalog.rules import check_draft
from kiln.local.emulator import run_emulator
from kiln.settings import Settings
from support.app import AUTHOR_KEY, RunningKiln, serve
from support.aws import AwsStack, key_emulator

DAY_S = 86_400.0
WRITES_PER_S = 0.05  # 4,320 write units a partition per day-long window
CALL = {"jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": "hello", "arguments": {}}}  # fmt: skip


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    state = tmp_path_factory.mktemp("throttled")
    key_emulator(state)
    limits = f"1000000/{WRITES_PER_S}"
    with run_emulator(state, partition_limits=limits, partition_window_s=DAY_S) as endpoint:
        yield endpoint.url


@pytest.fixture
def kiln(limited: str, tmp_path: Path) -> Iterator[RunningKiln]:
    suffix = uuid.uuid4().hex[:10]
    clients = make_clients(endpoint_url=limited, region="us-east-1")
    stack = AwsStack(limited, clients, f"kiln-t-{suffix}", f"kiln-t-{suffix}")
    ensure_resources(clients, table=stack.table, bucket=stack.bucket)
    settings = Settings(
        table=stack.table, bucket=stack.bucket, endpoint_url=limited, region="us-east-1",
        author_key=AUTHOR_KEY, bundle_cache_dir=tmp_path, bind_host="127.0.0.1",
        ledger_shards=1,
    )  # fmt: skip
    for running in serve(settings, stack, public_only=True):
        tool = {"name": "hello", "description": "d", "language": "python",
                "code": "print('hi')\n"}  # fmt: skip
        running.kiln.store.create(check_draft(tool), actor="test")
        yield running


def spend(kiln: RunningKiln, pk: str) -> None:
    """Write items into partition `pk` until DynamoDB refuses even a 1-unit one: its budget
    is spent (big items first, then smaller ones for what is left)."""
    client = boto3.client(
        "dynamodb", endpoint_url=kiln.kiln.settings.endpoint_url, region_name="us-east-1",
        config=Config(retries={"total_max_attempts": 1}),
    )  # fmt: skip
    written = 0
    for size in (390_000, 20_000, 100):
        while written < 1000:
            item = {"pk": {"S": pk}, "sk": {"S": f"filler-{written}"}, "x": {"S": "x" * size}}
            try:
                client.put_item(TableName=kiln.kiln.settings.table, Item=item)
            except ClientError as error:
                if error.response["Error"]["Code"] != "ProvisionedThroughputExceededException":
                    raise
                break
            written += 1
    assert written < 1000, f"the emulator never throttled {pk}: are its partition limits on?"


def answer(response: Any) -> dict[str, Any]:
    """The JSON-RPC message of an answer, sent as JSON or as one server-sent event."""
    text = response.text.strip()
    if text.startswith("{"):
        return dict(json.loads(text))
    data = [line[5:] for line in text.splitlines() if line.startswith("data:")]
    assert data, f"no JSON-RPC message in {text!r}"
    return dict(json.loads(data[-1]))


def test_a_call_whose_ledger_entry_is_throttled_says_it_was_not_recorded(
    kiln: RunningKiln,
) -> None:
    first = answer(kiln.mcp(CALL))
    assert "hi" in json.dumps(first.get("result")), first  # recorded and answered
    spend(kiln, f"LEDGER#{time.strftime('%Y-%m-%d', time.gmtime())}#0")

    refused = answer(kiln.mcp(CALL))

    error = refused.get("error")
    assert error is not None, f"answered although its ledger write was throttled: {refused}"
    assert error["code"] == -32000, error
    assert error["message"].startswith("Call not recorded: the tool ran"), error
    assert "Catalog unavailable" not in error["message"], error
    assert "retry" in error["message"], error
    assert refused["id"] == 7, refused


def test_a_call_whose_quota_cannot_be_counted_says_so_and_does_not_run(
    kiln: RunningKiln,
) -> None:
    view = {"name": "metered", "tools": ["hello"], "published": True, "anonymous": True,
            "quota": {"calls_per_minute": 1000}}  # fmt: skip
    kiln.kiln.views.store.put(check_view(view), expected_revision=None)
    spend(kiln, "QUOTA#view:metered")  # before the first call: it claims from the store

    refused = answer(kiln.mcp(CALL, path="/mcp/v/metered"))

    error = refused.get("error")
    assert error is not None, f"ran although its quota could not be counted: {refused}"
    assert error["code"] == -32000, error
    assert error["message"].startswith("Quota unavailable: this call's quota could not be"), error
    assert "the tool was not run" in error["message"], error
    assert "Catalog unavailable" not in error["message"], error
