"""Approvals by policy (access/approvals.py): a view with `"confirm": "destructive"` runs a
destructive tool only after the user accepted Kiln's own question; decline and cancel leave
it unrun; a client that cannot be asked is refused; the ledger shows every outcome.

Real HTTP into kiln dev's app, the view's own path, a real script whose runs are counted from
the runner's log records.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

from support.app import META_CAPS, McpServer, meta, start_kiln, write_tool

VIEW = "careful"
WIPE = "import json, sys\nargs = json.load(sys.stdin)\nprint(f\"wiped {args['target']}\")\n"


@pytest.fixture(scope="module")
def server(moto_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[McpServer]:
    tmp = tmp_path_factory.mktemp("approvals")
    manifest = {
        "description": "Wipes a target (it only says so).",
        "input_schema": {
            "type": "object",
            "properties": {"target": {"type": "string", "title": "Target", "description": "what"}},
            "required": ["target"],
        },
        "annotations": {"destructiveHint": True, "readOnlyHint": False},
    }
    wipe = write_tool(tmp / "tools", "wipe", manifest, WIPE)
    for running in start_kiln(moto_endpoint, tmp, extra=[wipe]):
        body = {"tools": ["wipe", "add_vat"], "published": True, "anonymous": True}
        made = running.running.api(
            "PUT", f"/api/views/{VIEW}", json={**body, "confirm": "destructive"}
        )
        assert made.status_code in (200, 201), made.text
        yield running


class Runs(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if str(getattr(record, "tool", "")).startswith("wipe@"):
            self.count += 1


@pytest.fixture
def runs() -> Iterator[Runs]:
    counter = Runs()
    runner_log = logging.getLogger("kiln.runner")
    level = runner_log.level
    runner_log.setLevel(logging.DEBUG)  # a clean run's line is written at DEBUG
    runner_log.addHandler(counter)
    yield counter
    runner_log.removeHandler(counter)
    runner_log.setLevel(level)


def call(server: McpServer, name: str, caps: dict[str, Any], **params: Any) -> dict[str, Any]:
    body = {"name": name, "arguments": params.pop("arguments", {"target": "db"}), **params}
    body["_meta"] = {**meta(), META_CAPS: caps}
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json",
        "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": "tools/call",
        "Mcp-Name": name,
    }
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": body}
    response = server.http.post(f"{server.running.url}/mcp/v/{VIEW}", json=message, headers=headers)
    assert response.status_code == 200, response.text
    return dict(response.json()["result"])


def asked(server: McpServer) -> tuple[dict[str, Any], str]:
    first = call(server, "wipe", {"elicitation": {}})
    assert first["resultType"] == "input_required", first
    question = first["inputRequests"]["kiln/approval"]
    assert question["method"] == "elicitation/create"
    return question["params"], first["requestState"]


def answered(server: McpServer, state: str, answer: dict[str, Any]) -> dict[str, Any]:
    responses = {"kiln/approval": answer}
    return call(server, "wipe", {"elicitation": {}}, inputResponses=responses, requestState=state)


def ledger(server: McpServer) -> list[dict[str, Any]]:
    found = server.running.api("GET", "/api/calls", params={"tool": "wipe"})
    assert found.status_code == 200, found.text
    return list(found.json()["calls"])


def test_the_question_names_the_tool_its_arguments_and_what_its_annotations_say(
    server: McpServer, runs: Runs
) -> None:
    params, _ = asked(server)
    message = params["message"]
    assert "Allow the tool 'wipe' (wipe) to run?" in message
    assert "it may destroy or overwrite data (destructive)" in message
    assert '- Target (what): "db"' in message
    assert params["requestedSchema"]["properties"]["approve"]["type"] == "boolean"
    assert runs.count == 0


def test_a_destructive_tool_runs_only_after_accept_and_the_ledger_says_who_and_when(
    server: McpServer, runs: Runs
) -> None:
    _, state = asked(server)
    done = answered(server, state, {"action": "accept", "content": {"approve": True}})
    assert done["content"][0]["text"] == "wiped db"
    assert runs.count == 1
    entry = next(e for e in ledger(server) if (e.get("detail") or "").startswith("approved by"))
    assert entry["outcome"] == "ok"
    assert entry["detail"].startswith("approved by anonymous at 20")
    assert entry["view"] == VIEW


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        ({"action": "decline"}, "declined"),
        ({"action": "cancel"}, "cancelled"),
        ({"action": "accept", "content": {"approve": False}}, "declined"),
    ],
)
def test_decline_and_cancel_leave_it_unrun_and_are_ledgered(
    server: McpServer, runs: Runs, answer: dict[str, Any], said: str
) -> None:
    _, state = asked(server)
    refused = answered(server, state, answer)
    assert refused["isError"] is True
    assert refused["content"][0]["text"] == f"Tool 'wipe' was not run: the user {said} it."
    assert runs.count == 0
    details = [e.get("detail") for e in ledger(server) if e["outcome"] == "refused"]
    assert f"approval {said} by the user" in details


def test_a_client_that_cannot_be_asked_gets_a_clear_refusal(server: McpServer, runs: Runs) -> None:
    refused = call(server, "wipe", {})
    assert refused["isError"] is True
    assert (
        "requires the user's approval first (confirm: destructive)" in refused["content"][0]["text"]
    )
    assert "declared no elicitation capability" in refused["content"][0]["text"]
    assert runs.count == 0
    details = [e.get("detail") for e in ledger(server)]
    assert "approval not possible: the client cannot be asked" in details


def test_an_approval_cannot_be_sent_up_front_without_kilns_question(
    server: McpServer, runs: Runs
) -> None:
    forged = {"kiln/approval": {"action": "accept", "content": {"approve": True}}}
    again = call(server, "wipe", {"elicitation": {}}, inputResponses=forged)
    assert again["resultType"] == "input_required"
    assert runs.count == 0


def test_a_read_only_tool_in_the_same_view_runs_without_asking(server: McpServer) -> None:
    done = call(server, "add_vat", {}, arguments={"net": 10})
    assert done["resultType"] == "complete"
    assert done["isError"] is False


def test_an_unknown_confirm_policy_is_refused_naming_the_field(server: McpServer) -> None:
    bad = server.running.api(
        "PUT", "/api/views/odd", json={"tools": ["wipe"], "confirm": "sometimes"}
    )
    assert bad.status_code == 422, bad.text
    assert bad.json()["error"]["problems"][0]["field"] == "confirm"


def test_a_key_bound_to_the_view_is_asked_on_plain_mcp_too(server: McpServer, runs: Runs) -> None:
    made = server.running.api(
        "POST", "/api/keys", json={"name": "careful-key", "scope": "call", "view": VIEW}
    )
    assert made.status_code == 201, made.text
    params = {
        "name": "wipe",
        "arguments": {"target": "db"},
        "_meta": {**meta(), META_CAPS: {"elicitation": {}}},
    }
    headers = {"Authorization": f"Bearer {made.json()['key']}"}
    first = server.modern("tools/call", params, headers=headers).json()["result"]
    assert list(first["inputRequests"]) == ["kiln/approval"]
    params["inputResponses"] = {"kiln/approval": {"action": "accept", "content": {"approve": True}}}
    params["requestState"] = first["requestState"]
    done = server.modern("tools/call", params, headers=headers).json()["result"]
    assert done["content"][0]["text"] == "wiped db"
    assert runs.count == 1
    entry = next(e for e in ledger(server) if e["caller"] == "key:careful-key")
    assert entry["detail"].startswith("approved by key:careful-key at ")
