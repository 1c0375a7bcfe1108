"""An approval nobody decides in time ends its call unrun (a short expiry: 2 s).

The deadline is seen by whoever reads the approval or its task next (the caller's
`tasks/get`, an approver's list): the approval moves pending -> expired once, the task ends
`completed` with an `isError` result saying so, the call is ledgered `refused`, and an
approval sent after that is refused.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

import pytest

from kiln.tasks.settings import TaskSettings
from support.app import META_CAPS, McpServer, meta, start_kiln, write_tool

TASKS = "io.modelcontextprotocol/tasks"
WIPE = "import json, sys\nargs = json.load(sys.stdin)\nprint(f\"wiped {args['target']}\")\n"
SCHEMA = {"type": "object", "properties": {"target": {"type": "string"}}, "required": ["target"]}


@pytest.fixture(scope="module")
def server(moto_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[McpServer]:
    tmp = tmp_path_factory.mktemp("approvals-expire")
    manifest = {"description": "Wipes.", "input_schema": SCHEMA,
                "annotations": {"destructiveHint": True}}  # fmt: skip
    wipe = write_tool(tmp / "tools", "wipe", manifest, WIPE)
    tasks = TaskSettings(approval_expiry_s=2.0)
    yield from start_kiln(moto_endpoint, tmp, extra=[wipe], tasks=tasks)


def key(server: McpServer, name: str, scope: str) -> str:
    made = server.running.api("POST", "/api/keys", json={"name": name, "scope": scope})
    assert made.status_code == 201, made.text
    return str(made.json()["key"])


def test_an_approval_nobody_decides_in_time_ends_the_call_unrun(
    server: McpServer, caplog: pytest.LogCaptureFixture
) -> None:
    view = {"name": "ops", "tools": ["wipe"], "confirm": "writes", "approvers": ["alice"]}
    assert server.running.api("POST", "/api/views", json=view).status_code == 201
    alice, dave = key(server, "alice", "author"), key(server, "dave", "call")
    bound = server.running.api("PUT", "/api/keys/dave/binding", json={"view": "ops"})
    assert bound.status_code == 200, bound.text
    caplog.set_level(logging.INFO, logger="kiln.audit")

    def rpc(method: str, **params: Any) -> dict[str, Any]:
        params["_meta"] = {**meta(), META_CAPS: {"extensions": {TASKS: {}}}}
        headers = {"Authorization": f"Bearer {dave}"}
        name = params.get("name") or params.get("taskId")
        answer = server.modern(method, params, headers=headers, name=name)
        assert answer.status_code == 200, answer.text
        return dict(answer.json()["result"])

    task = rpc("tools/call", name="wipe", arguments={"target": "db"})
    approval_id = task["_meta"]["kiln/approval"]["id"]
    assert task["status"] == "working"
    deadline = time.monotonic() + 60  # a wait on a loaded machine, not a speed claim
    while task["status"] == "working" and time.monotonic() < deadline:
        time.sleep(0.2)
        task = rpc("tasks/get", taskId=task["taskId"])
    assert task["status"] == "completed", task
    text = task["result"]["content"][0]["text"]
    assert task["result"]["isError"] is True
    assert text.startswith("Tool 'wipe' was not run: its approval expired at ")
    assert text.endswith("before anyone (alice) approved it.")
    late = server.running.api("POST", f"/api/approvals/{approval_id}/approve", key=alice)
    assert late.status_code == 409, late.text
    assert "expired at" in late.json()["error"]["message"]
    shown = server.running.api("GET", "/api/approvals", key=alice).json()["approvals"]
    assert [(a["id"], a["state"]) for a in shown] == [(approval_id, "expired")]
    calls = server.running.api("GET", "/api/calls", params={"limit": 50}).json()["calls"]
    entry = next(c for c in calls if c["caller"] == "key:dave")
    assert (entry["outcome"], entry["detail"]) == ("refused", "approval expired")
    assert '"audit": "approval.expire"' in caplog.text
    assert "wiped" not in text
