"""Kiln with a fault proxy between it and the store: cut, black hole, lost replies.

Every store call has a deadline; an unavailable store is a 503 with Retry-After on REST
and a "catalog unavailable" JSON-RPC error on MCP, within the deadline; the next request
after the store is back works; a write is never half applied; and a write whose reply was
lost is retried with its idempotency token, so its writer never hears 409 or 412 about it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import AwsStack
from kiln.aws.clients import StoreDeadlines, make_clients
from kiln.settings import Settings
from support.app import AUTHOR_KEY, RunningKiln, serve
from support.faultproxy import BLACK_HOLE, CUT, PASS, FaultProxy, fault_proxy

# Short deadlines keep the test quick; the mechanism is the one production uses.
DEADLINES = StoreDeadlines(connect_s=0.5, read_s=1.0, attempts=2)
MARGIN_S = 5.0  # the app's own work around the store calls, on a busy CI machine
TOOL = {"name": "faulty", "description": "d", "language": "python", "code": "print(1)\n"}
LIST = {"jsonrpc": "2.0", "id": 7, "method": "tools/list"}


@dataclass
class Faulty:
    kiln: RunningKiln
    proxy: FaultProxy


@pytest.fixture
def faulty(aws: AwsStack, tmp_path: Path) -> Iterator[Faulty]:
    with fault_proxy(aws.endpoint_url) as proxy:
        clients = make_clients(
            endpoint_url=proxy.url,
            region="us-east-1",
            credentials=("testing", "testing"),
            deadlines=DEADLINES,
        )
        settings = Settings(
            bundle_cache_dir=tmp_path / "bundles",
            table=aws.table,
            bucket=aws.bucket,
            endpoint_url=proxy.url,
            region="us-east-1",
            author_key=AUTHOR_KEY,
            bind_host="127.0.0.1",
        )
        through_proxy = AwsStack(proxy.url, clients, aws.table, aws.bucket)
        for kiln in serve(settings, through_proxy):
            yield Faulty(kiln, proxy)


@pytest.mark.parametrize("mode", [CUT, BLACK_HOLE])
def test_an_unavailable_store_gets_503_and_catalog_unavailable_within_the_deadline(
    faulty: Faulty, mode: str
) -> None:
    kiln = faulty.kiln
    assert kiln.api("POST", "/api/tools", json=TOOL).status_code == 201
    faulty.proxy.set_mode(mode)

    started = time.monotonic()
    listed = kiln.api("GET", "/api/tools")
    rest_s = time.monotonic() - started
    assert listed.status_code == 503
    assert listed.headers["Retry-After"] == "1"
    assert listed.json()["error"]["code"] == "catalog_unavailable"
    assert rest_s < DEADLINES.worst_case_s + MARGIN_S

    started = time.monotonic()
    answer = kiln.mcp(LIST)
    mcp_s = time.monotonic() - started
    assert answer.headers["content-type"].startswith("application/json")
    error = answer.json()["error"]
    assert answer.json()["id"] == 7
    assert error["code"] == -32000
    assert error["message"].startswith("Catalog unavailable")
    assert mcp_s < DEADLINES.worst_case_s + MARGIN_S

    faulty.proxy.set_mode(PASS)
    assert kiln.api("GET", "/api/tools").status_code == 200
    assert [tool["name"] for tool in kiln.mcp(LIST).json()["result"]["tools"]] == ["faulty"]


def test_a_write_refused_while_the_store_is_cut_leaves_nothing_half_written(
    faulty: Faulty,
) -> None:
    kiln = faulty.kiln
    faulty.proxy.set_mode(CUT)
    refused = kiln.api("POST", "/api/tools", json=TOOL)
    assert refused.status_code == 503
    faulty.proxy.set_mode(PASS)
    assert kiln.api("GET", "/api/tools/faulty").status_code == 404
    created = kiln.api("POST", "/api/tools", json=TOOL)  # the name was never claimed
    assert created.status_code == 201
    assert created.json()["revision"] == 1


def test_writes_whose_replies_are_lost_succeed_once_without_a_false_conflict(
    faulty: Faulty,
) -> None:
    kiln = faulty.kiln
    faulty.proxy.lose_replies(1, b"TransactWriteItems")
    created = kiln.api("POST", "/api/tools", json=TOOL)
    assert faulty.proxy.replies_left_to_lose == 0  # a reply really was lost
    assert created.status_code == 201, created.text

    faulty.proxy.lose_replies(1, b"TransactWriteItems")
    edited = {**TOOL, "description": "edited"}
    updated = kiln.api("PUT", "/api/tools/faulty", json=edited, headers={"If-Match": '"1"'})
    assert faulty.proxy.replies_left_to_lose == 0
    assert updated.status_code == 200, updated.text
    assert updated.json()["revision"] == 2

    history = kiln.api("GET", "/api/tools/faulty/revisions").json()
    assert [revision["revision"] for revision in history["revisions"]] == [1, 2]


def test_a_task_creation_the_store_does_not_answer_gets_the_documented_minus_32000(
    faulty: Faulty,
) -> None:
    kiln = faulty.kiln
    task_tool = {**TOOL, "name": "faulty_task", "task": "optional"}
    assert kiln.api("POST", "/api/tools", json=task_tool).status_code == 201
    faulty.proxy.lose_replies(DEADLINES.attempts, b'"RUNNING"')  # the task item's write
    call = {"jsonrpc": "2.0", "id": 9, "method": "tools/call",
            "params": {"name": "faulty_task", "arguments": {}, "task": {"ttl": 60000}}}  # fmt: skip
    answer = kiln.mcp(call, headers={"MCP-Protocol-Version": "2025-11-25"})
    assert faulty.proxy.replies_left_to_lose == 0, "the task's write was never sent"
    error = answer.json().get("error")
    assert error is not None, answer.text
    assert (error["code"], answer.json()["id"]) == (-32000, 9), error
    assert error["message"].startswith("Catalog unavailable"), error


def test_a_create_the_store_applied_but_never_answered_is_answered_as_made(
    faulty: Faulty,
) -> None:
    """Every attempt's reply lost: the tool exists, so the author hears 201 (a 503 would send
    them to retry into "already exists")."""
    kiln = faulty.kiln
    faulty.proxy.lose_replies(DEADLINES.attempts, b"TransactWriteItems")
    created = kiln.api("POST", "/api/tools", json=TOOL)
    assert faulty.proxy.replies_left_to_lose == 0  # every reply really was lost
    assert created.status_code == 201, created.text
    assert created.json()["revision"] == 1
    assert kiln.api("GET", "/api/tools/faulty").status_code == 200


def test_a_key_the_store_cannot_look_up_gets_the_edge_s_json_rpc_503(faulty: Faulty) -> None:
    """An error raised out of the /mcp handler itself (the key's lookup, before the protocol
    layer) is answered by the app's one table, on the path served ahead of the router."""
    faulty.proxy.set_mode(CUT)
    answer = faulty.kiln.mcp(LIST, headers={"Authorization": "Bearer kiln_call_" + "k" * 43})
    assert answer.status_code == 503, answer.text
    assert answer.headers["Retry-After"] == "1", answer.headers
    assert answer.json()["error"]["code"] == -32000, answer.text
    assert answer.json()["jsonrpc"] == "2.0", answer.text
