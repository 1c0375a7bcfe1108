"""A task-augmented `tools/call` counts like a plain call: admitted against the key's quotas
when the task is created, ledgered with its outcome when its run ends, its run-seconds
charged to the key. Real HTTP into the app (its local worker pool), the moto server, real
scripts in real processes, on both wires."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from kiln.tasks.settings import TaskSettings
from support.app import META_CAPS, McpServer, meta, start_kiln, write_tool

EXT = "io.modelcontextprotocol/tasks"
TERMINAL = {"completed", "failed", "cancelled"}
NAPPER = """
import json, sys, time
args = json.load(sys.stdin)
time.sleep(args["seconds"])
print(f"slept {args['seconds']}")
"""
BROKEN = "import sys\nprint('no', file=sys.stderr)\nsys.exit(3)\n"


@pytest.fixture(scope="module")
def server(moto_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[McpServer]:
    tmp = tmp_path_factory.mktemp("task-calls")
    manifest = {"description": "d", "task": "optional", "timeout_seconds": 120,
                "input_schema": {"type": "object"}}  # fmt: skip
    napper = write_tool(tmp / "tools", "napper", manifest, NAPPER)
    broken = write_tool(tmp / "tools", "broken", manifest, BROKEN)
    yield from start_kiln(
        moto_endpoint,
        tmp,
        extra=[napper, broken],
        tasks=TaskSettings(
            heartbeat_s=0.2,
            lease_s=2.0,
            start_grace_s=5.0,
            poll_interval_ms=200,
            max_running_per_principal=2,
        ),
    )


def new_key(server: McpServer, quota: dict[str, Any] | None = None) -> tuple[str, str]:
    """A call key (its name, its secret), with `quota` when given."""
    name = f"t{uuid.uuid4().hex[:10]}"
    body: dict[str, Any] = {"name": name, "scope": "call"}
    if quota is not None:
        body["quota"] = quota
    created = server.running.api("POST", "/api/keys", json=body)
    assert created.status_code == 201, created.text
    return name, str(created.json()["key"])


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


def start_task(
    server: McpServer, wire: str, secret: str, name: str, arguments: dict[str, Any]
) -> Any:
    """Ask for `name` as a task; the HTTP answer (a task's id is in the body when created)."""
    if wire == "modern":
        envelope = meta()
        envelope[META_CAPS] = {"extensions": {EXT: {}}}
        params = {"name": name, "arguments": arguments, "_meta": envelope}
        return server.modern("tools/call", params, headers=bearer(secret))
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
               "params": {"name": name, "arguments": arguments, "task": {}}}  # fmt: skip
    return server.post(message, {"MCP-Protocol-Version": "2025-11-25", **bearer(secret)})


def task_id_of(answer: Any) -> str:
    assert answer.status_code == 200, answer.text
    result = answer.json()["result"]
    task = result.get("task", result)  # 2025-11-25 wraps it; 2026 answers the task itself
    return str(task["taskId"])


def status_of(server: McpServer, wire: str, secret: str, task_id: str) -> str:
    if wire == "modern":
        envelope = meta()
        envelope[META_CAPS] = {"extensions": {EXT: {}}}
        answer = server.modern("tasks/get", {"taskId": task_id, "_meta": envelope},
                               headers=bearer(secret), name=task_id)  # fmt: skip
    else:
        message = {"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"taskId": task_id}}
        answer = server.post(message, {"MCP-Protocol-Version": "2025-11-25", **bearer(secret)})
    return str(answer.json()["result"]["status"])


def wait_for(check: Callable[[], Any], *, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"not true within {timeout} s")


def settled(server: McpServer, wire: str, secret: str, task_id: str) -> str:
    ended: str = wait_for(lambda: (s := status_of(server, wire, secret, task_id)) in TERMINAL and s)
    return ended


def ledger(server: McpServer, key_name: str) -> list[dict[str, Any]]:
    answer = server.running.api("GET", "/api/calls", params={"caller": f"key:{key_name}"})
    assert answer.status_code == 200, answer.text
    calls: list[dict[str, Any]] = answer.json()["calls"]
    return calls


@pytest.mark.parametrize("wire", ["modern", "legacy"])
def test_a_task_call_is_ledgered_once_with_its_outcome_when_its_run_ends(
    server: McpServer, wire: str
) -> None:
    name, secret = new_key(server)
    planted = f"planted-{uuid.uuid4().hex}"
    task_id = task_id_of(start_task(server, wire, secret, "napper",
                                    {"seconds": 0.3, "note": planted}))  # fmt: skip
    assert settled(server, wire, secret, task_id) == "completed"
    (entry,) = ledger(server, name)  # written with the task's end: there once it has ended
    assert entry["tool"] == "napper"
    assert entry["revision"] == 1
    assert entry["outcome"] == "ok"
    assert entry["detail"] == "task"
    assert entry["duration_ms"] >= 300
    assert entry["output_bytes"] == len("slept 0.3\n")
    assert entry["args_digest"].startswith("hmac-sha256:")
    assert planted not in json.dumps(entry)


def test_a_task_whose_tool_fails_is_ledgered_as_a_tool_error(server: McpServer) -> None:
    name, secret = new_key(server)
    task_id = task_id_of(start_task(server, "modern", secret, "broken", {}))
    assert settled(server, "modern", secret, task_id) == "completed"  # with isError
    assert [e["outcome"] for e in ledger(server, name)] == ["tool_error"]


def test_a_cancelled_task_is_ledgered_once_as_cancelled(server: McpServer) -> None:
    name, secret = new_key(server)
    task_id = task_id_of(start_task(server, "legacy", secret, "napper", {"seconds": 60}))
    assert ledger(server, name) == []  # nothing until the call ends
    message = {"jsonrpc": "2.0", "id": 2, "method": "tasks/cancel", "params": {"taskId": task_id}}
    cancel = server.post(message, {"MCP-Protocol-Version": "2025-11-25", **bearer(secret)})
    assert cancel.json()["result"]["status"] == "cancelled", cancel.text
    (entry,) = ledger(server, name)
    assert (entry["tool"], entry["outcome"], entry["detail"]) == (
        "napper", "cancelled", "task cancelled"
    )  # fmt: skip


def test_a_task_refused_for_too_many_running_is_ledgered_as_a_tool_error(
    server: McpServer,
) -> None:
    name, secret = new_key(server)
    running = [task_id_of(start_task(server, "modern", secret, "napper", {"seconds": 60}))
               for _ in "ab"]  # fmt: skip
    refused = start_task(server, "modern", secret, "napper", {"seconds": 60})
    assert refused.json()["result"]["isError"] is True, refused.text
    assert "Too many running tasks" in refused.text
    (entry,) = ledger(server, name)
    assert entry["outcome"] == "tool_error"
    assert entry["detail"].startswith("task not started: Too many running tasks")
    assert entry["duration_ms"] == 0
    for task_id in running:
        message = {"jsonrpc": "2.0", "id": 3, "method": "tasks/cancel",
                   "params": {"taskId": task_id}}  # fmt: skip
        server.post(message, {"MCP-Protocol-Version": "2025-11-25", **bearer(secret)})
    assert sorted(e["outcome"] for e in ledger(server, name)) == [
        "cancelled", "cancelled", "tool_error"
    ]  # fmt: skip


@pytest.mark.parametrize("wire", ["modern", "legacy"])
def test_a_task_past_the_keys_calls_per_minute_is_refused_when_created(
    server: McpServer, wire: str
) -> None:
    name, secret = new_key(server, {"calls_per_minute": 2})
    ids = [task_id_of(start_task(server, wire, secret, "napper", {"seconds": 0})) for _ in "ab"]
    refused = start_task(server, wire, secret, "napper", {"seconds": 0})
    assert refused.status_code == 429, refused.text
    assert 1 <= int(refused.headers["retry-after"]) <= 60
    assert "calls per minute" in refused.text
    for task_id in ids:
        assert settled(server, wire, secret, task_id) == "completed"
    outcomes = sorted(e["outcome"] for e in ledger(server, name))
    assert outcomes == ["ok", "ok", "refused"]


def test_task_run_seconds_are_charged_to_the_key_until_its_day_is_spent(
    server: McpServer,
) -> None:
    name, secret = new_key(server, {"run_seconds_per_day": 0.5})
    task_id = task_id_of(start_task(server, "modern", secret, "napper", {"seconds": 0.8}))
    assert settled(server, "modern", secret, task_id) == "completed"
    # The run's 0.8 s were charged before the task was seen to end: the day is spent.
    for wire in ("modern", "legacy"):
        refused = start_task(server, wire, secret, "napper", {"seconds": 0})
        assert refused.status_code == 429, refused.text
        assert "run-seconds per day" in refused.text
    plain = server.modern("tools/call", {"name": "napper", "arguments": {"seconds": 0}},
                          headers=bearer(secret))  # fmt: skip
    assert plain.status_code == 429, plain.text
    outcomes = [e["outcome"] for e in ledger(server, name)]
    assert sorted(outcomes) == ["ok", "refused", "refused", "refused"]


def test_an_authors_rest_run_as_a_task_is_not_a_ledgered_call(server: McpServer) -> None:
    def napper_calls() -> int:
        found = server.running.api("GET", "/api/calls", params={"tool": "napper", "limit": 1000})
        return len(found.json()["calls"])

    before = napper_calls()
    started = server.running.api(
        "POST", "/api/tools/napper/run", json={"arguments": {"seconds": 0}, "task": True}
    )
    assert started.status_code == 202, started.text
    poll = started.json()["poll"]
    assert wait_for(lambda: server.running.api("GET", poll).json()["status"] in TERMINAL)
    assert napper_calls() == before  # like a plain REST run: authoring, not a tools/call
