"""Approvals by a key's own policy, and approvals of task-augmented calls.

A key made with `"confirm": "destructive"` (REST; `kiln keys --confirm` in the CLI test at the
end) has the user approve a destructive tool before it runs, whatever view it reaches: plain
calls through input_required, task calls through the task's own `input_required` state and
`tasks/update`. It runs only after "accept", never after "decline" or "cancel"; a task client
that cannot answer is refused before any task is made; the ledger shows every outcome.

Real HTTP into kiln dev's app (and `kiln dev` itself for the CLI), real scripts whose runs
are counted from the runner's own log records.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.app import META_CAPS, McpServer, meta, start_kiln, write_tool
from support.devserver import kiln_dev
from support.runs import Runs, counting_runs

TASKS = "io.modelcontextprotocol/tasks"
WIPE = "import json, sys\nargs = json.load(sys.stdin)\nprint(f\"wiped {args['target']}\")\n"
SCHEMA = {
    "type": "object",
    "properties": {"target": {"type": "string", "title": "Target", "description": "what"}},
    "required": ["target"],
}
DESTRUCTIVE = {"destructiveHint": True, "readOnlyHint": False}
ACCEPT = {"action": "accept", "content": {"approve": True}}


@pytest.fixture(scope="module")
def server(moto_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[McpServer]:
    tmp = tmp_path_factory.mktemp("key-approvals")
    tools = tmp / "tools"
    plain = {"description": "Wipes a target.", "input_schema": SCHEMA, "annotations": DESTRUCTIVE}
    wipe = write_tool(tools, "wipe", plain, WIPE)
    job = write_tool(tools, "wipe_job", {**plain, "task": "optional"}, WIPE)
    looks = write_tool(
        tools, "look", {**plain, "annotations": {"readOnlyHint": True}}, WIPE
    )  # read-only: never asked under "destructive"
    yield from start_kiln(moto_endpoint, tmp, extra=[wipe, job, looks])


@pytest.fixture
def runs() -> Iterator[Runs]:
    with counting_runs() as counter:
        yield counter


def new_key(server: McpServer, **binding: Any) -> tuple[str, str]:
    name = f"sure-{uuid.uuid4().hex[:8]}"
    made = server.running.api("POST", "/api/keys", json={"name": name, "scope": "call", **binding})
    assert made.status_code == 201, made.text
    assert made.json()["confirm"] == binding.get("confirm")
    return name, str(made.json()["key"])


def rpc(
    server: McpServer, key: str, method: str, caps: dict[str, Any], **params: Any
) -> dict[str, Any]:
    params["_meta"] = {**meta(), META_CAPS: caps}
    name = params.get("name") or params.get("taskId")
    headers = {"Authorization": f"Bearer {key}"}
    response = server.modern(method, params, headers=headers, name=name)
    assert response.status_code == 200, response.text
    body = response.json()
    assert "result" in body, body
    return dict(body["result"])


def ledger(server: McpServer, key_name: str) -> list[dict[str, Any]]:
    found = server.running.api("GET", "/api/calls", params={"limit": 200})
    assert found.status_code == 200, found.text
    return [e for e in found.json()["calls"] if e["caller"] == f"key:{key_name}"]


def task_in(server: McpServer, key: str, task_id: str, *statuses: str) -> dict[str, Any]:
    caps = {"elicitation": {}, "extensions": {TASKS: {}}}
    deadline = time.monotonic() + 90  # a wait on a loaded machine, not a speed claim
    task: dict[str, Any] = {}
    while time.monotonic() < deadline:
        task = rpc(server, key, "tasks/get", caps, taskId=task_id)
        if task["status"] in statuses:
            return task
        time.sleep(0.1)
    raise AssertionError(f"task {task_id} never reached {statuses}: {task}")


# ------------------------------------------------------------------ plain calls, key policy


def test_a_keys_own_confirm_asks_before_a_destructive_tool_and_runs_only_on_accept(
    server: McpServer, runs: Runs
) -> None:
    name, key = new_key(server, confirm="destructive")
    caps = {"elicitation": {}}
    call = {"name": "wipe", "arguments": {"target": "db"}}
    first = rpc(server, key, "tools/call", caps, **call)
    assert first["resultType"] == "input_required", first
    question = first["inputRequests"]["kiln/approval"]
    assert "Allow the tool 'wipe' (wipe) to run?" in question["params"]["message"]
    assert runs.of.get("wipe", 0) == 0
    state = first["requestState"]
    responses = {"kiln/approval": ACCEPT}
    done = rpc(
        server, key, "tools/call", caps, **call, inputResponses=responses, requestState=state
    )
    assert done["content"][0]["text"] == "wiped db", done
    assert runs.of.get("wipe") == 1
    (entry,) = ledger(server, name)
    assert entry["outcome"] == "ok"
    assert entry["detail"].startswith(f"approved by key:{name} at 20")


@pytest.mark.parametrize(
    ("answer", "said"),
    [({"action": "decline"}, "declined"), ({"action": "cancel"}, "cancelled")],
)
def test_a_keys_confirm_declined_or_cancelled_leaves_the_tool_unrun(
    server: McpServer, runs: Runs, answer: dict[str, Any], said: str
) -> None:
    name, key = new_key(server, confirm="destructive")
    caps = {"elicitation": {}}
    call = {"name": "wipe", "arguments": {"target": "db"}}
    first = rpc(server, key, "tools/call", caps, **call)
    state, responses = first["requestState"], {"kiln/approval": answer}
    refused = rpc(server, key, "tools/call", caps, **call, inputResponses=responses,
                  requestState=state)  # fmt: skip
    assert refused["isError"] is True
    assert refused["content"][0]["text"] == f"Tool 'wipe' was not run: the user {said} it."
    assert runs.of.get("wipe", 0) == 0
    (entry,) = ledger(server, name)
    assert (entry["outcome"], entry["detail"]) == ("refused", f"approval {said} by the user")


def test_a_keys_confirm_refuses_a_client_that_cannot_be_asked_naming_the_key(
    server: McpServer, runs: Runs
) -> None:
    name, key = new_key(server, confirm="writes")
    refused = rpc(server, key, "tools/call", {}, name="wipe", arguments={"target": "db"})
    text = refused["content"][0]["text"]
    assert refused["isError"] is True
    assert f"key '{name}' requires the user's approval first (confirm: writes)" in text, text
    assert runs.of.get("wipe", 0) == 0
    (entry,) = ledger(server, name)
    assert entry["detail"] == "approval not possible: the client cannot be asked"


def test_a_read_only_tool_runs_unasked_under_a_destructive_key(server: McpServer) -> None:
    _, key = new_key(server, confirm="destructive")
    done = rpc(server, key, "tools/call", {}, name="look", arguments={"target": "x"})
    assert done["resultType"] == "complete"
    assert done["content"][0]["text"] == "wiped x"


def test_a_keys_confirm_is_set_and_cleared_by_its_binding_and_checked(server: McpServer) -> None:
    name, key = new_key(server)
    bound = server.running.api("PUT", f"/api/keys/{name}/binding", json={"confirm": "writes"})
    assert bound.status_code == 200, bound.text
    assert bound.json()["confirm"] == "writes"
    asked = rpc(server, key, "tools/call", {"elicitation": {}}, name="look",
                arguments={"target": "x"})  # fmt: skip
    assert asked["resultType"] == "complete"  # read-only: not asked even under "writes"
    asked = rpc(server, key, "tools/call", {"elicitation": {}}, name="wipe",
                arguments={"target": "x"})  # fmt: skip
    assert asked["resultType"] == "input_required"
    cleared = server.running.api("PUT", f"/api/keys/{name}/binding", json={})
    assert cleared.json()["confirm"] is None
    bad = server.running.api("PUT", f"/api/keys/{name}/binding", json={"confirm": "often"})
    assert bad.status_code == 422, bad.text
    assert "confirm must be one of destructive, writes" in bad.text


# ------------------------------------------------------------------ task-augmented calls


def start_task(server: McpServer, key: str, caps: dict[str, Any]) -> dict[str, Any]:
    return rpc(server, key, "tools/call", {**caps, "extensions": {TASKS: {}}},
               name="wipe_job", arguments={"target": "db"})  # fmt: skip


def test_a_task_waits_for_approval_and_runs_only_after_accept(
    server: McpServer, runs: Runs
) -> None:
    name, key = new_key(server, confirm="destructive")
    created = start_task(server, key, {"elicitation": {}})
    assert created["resultType"] == "task", created
    task = task_in(server, key, created["taskId"], "input_required")
    question = task["inputRequests"]["kiln/approval"]
    assert question["method"] == "elicitation/create"
    assert "Allow the tool 'wipe_job' (wipe_job) to run?" in question["params"]["message"]
    assert runs.of.get("wipe_job", 0) == 0
    caps = {"elicitation": {}, "extensions": {TASKS: {}}}
    rpc(server, key, "tasks/update", caps, taskId=created["taskId"],
        inputResponses={"kiln/approval": ACCEPT})  # fmt: skip
    done = task_in(server, key, created["taskId"], "completed", "failed", "cancelled")
    assert done["status"] == "completed", done
    assert done["result"]["content"][0]["text"] == "wiped db"
    assert runs.of.get("wipe_job") == 1
    (entry,) = ledger(server, name)
    assert entry["outcome"] == "ok"
    assert entry["detail"].startswith(f"task; approved by key:{name} at 20"), entry


@pytest.mark.parametrize(
    ("answer", "said"),
    [({"action": "decline"}, "declined"), ({"action": "cancel"}, "cancelled")],
)
def test_a_task_declined_or_cancelled_ends_unrun_and_is_ledgered(
    server: McpServer, runs: Runs, answer: dict[str, Any], said: str
) -> None:
    name, key = new_key(server, confirm="destructive")
    created = start_task(server, key, {"elicitation": {}})
    task_in(server, key, created["taskId"], "input_required")
    caps = {"elicitation": {}, "extensions": {TASKS: {}}}
    rpc(server, key, "tasks/update", caps, taskId=created["taskId"],
        inputResponses={"kiln/approval": answer})  # fmt: skip
    done = task_in(server, key, created["taskId"], "completed", "failed", "cancelled")
    assert done["status"] == "completed", done
    assert done["result"]["isError"] is True
    assert (
        done["result"]["content"][0]["text"] == f"Tool 'wipe_job' was not run: the user {said} it."
    )
    assert runs.of.get("wipe_job", 0) == 0
    (entry,) = ledger(server, name)
    assert (entry["outcome"], entry["detail"]) == ("refused", f"approval {said} by the user")


def test_a_task_client_that_cannot_answer_is_refused_before_any_task(
    server: McpServer, runs: Runs
) -> None:
    name, key = new_key(server, confirm="destructive")
    refused = start_task(server, key, {})
    assert refused.get("isError") is True, refused
    text = refused["content"][0]["text"]
    assert f"key '{name}' requires the user's approval first" in text, text
    assert "tasks/update" in text
    assert runs.of.get("wipe_job", 0) == 0
    (entry,) = ledger(server, name)
    assert (entry["outcome"], entry["detail"]) == (
        "refused",
        "approval not possible: the client cannot be asked",
    )


# ------------------------------------------------------------------ the CLI, on kiln dev


def test_kiln_keys_create_and_bind_set_a_keys_confirm_and_ls_shows_it(tmp_path: Path) -> None:
    tools = tmp_path / "tools"
    write_tool(tools, "wipe", {"description": "Wipes.", "input_schema": SCHEMA,
                               "annotations": DESTRUCTIVE}, WIPE)  # fmt: skip
    with kiln_dev(tmp_path / "state", "--no-examples", "--tools", str(tools)) as dev:
        key = dev.create_key("careful", "--confirm", "destructive")
        params = {"name": "wipe", "arguments": {"target": "db"}}
        refused = dev.mcp("tools/call", params, wire="modern", key=key).json()["result"]
        assert "key 'careful' requires the user's approval first" in refused["content"][0]["text"]
        bound = dev.kiln("keys", "bind", "careful", "--confirm", "writes")
        assert bound.returncode == 0, bound.stderr
        assert "confirm writes" in bound.stdout
        listed = dev.kiln("keys", "ls")
        (row,) = [line for line in listed.stdout.splitlines() if line.startswith("careful ")]
        assert row.endswith("confirm writes"), listed.stdout
        wrong = dev.kiln("keys", "bind", "careful", "--confirm", "sometimes")
        assert wrong.returncode != 0
        assert "invalid choice: 'sometimes'" in wrong.stderr
        cleared = dev.kiln("keys", "bind", "careful")
        assert cleared.returncode == 0, cleared.stderr
        ran = dev.mcp("tools/call", params, wire="modern", key=key).json()["result"]
        assert ran["content"][0]["text"] == "wiped db", ran
