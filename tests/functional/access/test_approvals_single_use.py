"""An approval runs its tool once: the same approved request sent again is not run.

A key with `confirm: destructive` approves a destructive tool through `kiln/approval` over MCP
2026-07-28; the approved request carries a sealed requestState that a client (or anyone who
saw it) could send again as it is. Two processes of the public function's app share one table
and one state secret, as Lambda containers do: an approval spent in one is spent in the other,
because it is spent in the store. Every AWS call is checked against the function's role
(`support.iam_roles`).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest

from conftest import AwsStack
from kiln.accounting.ledger import LedgerQuery
from kiln.authoring import AuthoringService
from kiln.catalog.store import CatalogStore
from kiln.identity.keys import KeyStore
from support.app import (
    META_CAPS,
    MODERN,
    McpServer,
    RunningKiln,
    meta,
    serve,
    settings_for,
    start_kiln,
)

WIPE = "import json, sys\nargs = json.load(sys.stdin)\nprint(f\"wiped {args['target']}\")\n"
TOOL = {
    "name": "wipe",
    "description": "Wipes a target.",
    "language": "python",
    "code": WIPE,
    "input_schema": {
        "type": "object",
        "properties": {"target": {"type": "string"}},
        "required": ["target"],
    },
    "annotations": {"destructiveHint": True, "readOnlyHint": False},
}
ACCEPT = {"action": "accept", "content": {"approve": True}}
CALL = {"name": "wipe", "arguments": {"target": "db"}}
ASKS = {"elicitation": {}}


@pytest.fixture
def two(aws: AwsStack, tmp_path: Path) -> Iterator[tuple[RunningKiln, RunningKiln, str]]:
    """Two public-function processes over one table (one state secret), and a careful key."""
    AuthoringService(CatalogStore(aws.clients.dynamodb, aws.clients.s3, table=aws.table,
                                  bucket=aws.bucket)).create(TOOL, None)  # fmt: skip
    _, key = KeyStore(aws.clients.dynamodb, table=aws.table).create(
        "careful", "call", confirm="destructive"
    )
    secret = uuid.uuid4().hex
    with ExitStack() as stack:
        running = [
            stack.enter_context(
                _served(settings_for(aws, tmp_path / f"{n}", state_secret=secret), aws)
            )
            for n in range(2)
        ]
        yield running[0], running[1], key


@contextmanager
def _served(settings: Any, aws: AwsStack) -> Iterator[RunningKiln]:
    yield from serve(settings, aws, public_only=True)


def call(kiln: RunningKiln, key: str, caps: dict[str, Any], **params: Any) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {**CALL, **params, "_meta": {**meta(), META_CAPS: caps}}}  # fmt: skip
    headers = {"Authorization": f"Bearer {key}", "MCP-Protocol-Version": MODERN,
               "Mcp-Method": "tools/call", "Mcp-Name": "wipe"}  # fmt: skip
    response = kiln.mcp(body, headers=headers)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert "result" in answer, answer
    return dict(answer["result"])


def ledger(kiln: RunningKiln, count: int) -> list[tuple[str, str]]:
    """(outcome, detail) of the key's calls, oldest first, once `count` are in the store."""
    assert kiln.kiln.gate.ledger is not None
    query = LedgerQuery(caller="key:careful", limit=50)
    deadline = time.monotonic() + 30  # a wait on a loaded machine, not a speed claim
    while True:
        entries, _ = kiln.kiln.gate.ledger.query(query)
        found = [(e.outcome, str(e.detail)) for e in reversed(entries)]
        if len(found) >= count or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def approved(kiln: RunningKiln, key: str) -> dict[str, Any]:
    """The params that answer the approval question with accept (its requestState too)."""
    asked = call(kiln, key, ASKS)
    assert asked["resultType"] == "input_required", asked
    return {"inputResponses": {"kiln/approval": ACCEPT}, "requestState": asked["requestState"]}


def test_an_approved_request_sent_again_is_not_run_and_is_asked_afresh(
    two: tuple[RunningKiln, RunningKiln, str],
) -> None:
    first, _, key = two
    sent = approved(first, key)
    ran = call(first, key, ASKS, **sent)
    assert ran["content"][0]["text"] == "wiped db", ran
    again = call(first, key, ASKS, **sent)
    assert again.get("resultType") == "input_required", f"the replay ran the tool again: {again}"
    message = again["inputRequests"]["kiln/approval"]["params"]["message"]
    assert message.startswith("The approval sent with this call was already used"), message
    assert "Allow the tool 'wipe' (wipe) to run?" in message
    assert again["requestState"] != sent["requestState"]
    assert [outcome for outcome, _ in ledger(first, 2)] == ["ok", "refused"]
    assert ledger(first, 2)[1][1] == "approval already used"
    # The fresh question, answered, runs the tool once more: a second approval, a second run.
    fresh = {"inputResponses": {"kiln/approval": ACCEPT}, "requestState": again["requestState"]}
    assert call(first, key, ASKS, **fresh)["content"][0]["text"] == "wiped db"
    assert [outcome for outcome, _ in ledger(first, 3)] == ["ok", "refused", "ok"]


def test_an_approval_spent_in_one_process_is_not_run_by_another(
    two: tuple[RunningKiln, RunningKiln, str],
) -> None:
    first, second, key = two
    sent = approved(first, key)
    assert call(first, key, ASKS, **sent)["content"][0]["text"] == "wiped db"
    again = call(second, key, {}, **sent)  # and a client that cannot be asked this time
    assert again.get("isError") is True, f"another process ran the tool again: {again}"
    assert again["content"][0]["text"] == (
        "Tool 'wipe' was not run: the approval sent with this call was already used (an "
        "approval runs a tool once); call it again without requestState to be asked again."
    )
    outcomes = ledger(first, 2)
    assert outcomes[0][0] == "ok", outcomes
    assert outcomes[0][1].startswith("approved by key:careful"), outcomes
    assert outcomes[1:] == [("refused", "approval already used")], outcomes


@pytest.fixture(scope="module")
def conformance(
    moto_endpoint: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[McpServer]:
    """kiln dev's app with the conformance tools (test_tool_with_task asks first)."""
    yield from start_kiln(moto_endpoint, tmp_path_factory.mktemp("single-use-tasks"))


def test_a_tool_that_asks_first_makes_one_task_from_one_approval(conformance: McpServer) -> None:
    """Approved, asked its own question, answered: one task. The same last request again is
    asked afresh, and no second task is made."""
    made = conformance.running.api("POST", "/api/keys", json={
        "name": "careful", "scope": "call", "confirm": "destructive"})  # fmt: skip
    assert made.status_code == 201, made.text
    headers = {"Authorization": f"Bearer {made.json()['key']}"}
    caps = {**ASKS, "extensions": {"io.modelcontextprotocol/tasks": {}}}

    def call(**params: Any) -> dict[str, Any]:
        params = {"name": "test_tool_with_task", "arguments": {}, **params,
                  "_meta": {**meta(), META_CAPS: caps}}  # fmt: skip
        answer = conformance.modern("tools/call", params, headers=headers).json()
        assert "result" in answer, answer
        return dict(answer["result"])

    asked = call()
    assert list(asked["inputRequests"]) == ["kiln/approval"], asked
    named = call(inputResponses={"kiln/approval": ACCEPT}, requestState=asked["requestState"])
    assert list(named["inputRequests"]) == ["user_name"], named
    last = {"inputResponses": {"user_name": {"action": "accept", "content": {"name": "Ada"}}},
            "requestState": named["requestState"]}  # fmt: skip
    assert call(**last)["resultType"] == "task"
    again = call(**last)
    assert again.get("resultType") == "input_required", f"a second task from one approval: {again}"
    message = again["inputRequests"]["kiln/approval"]["params"]["message"]
    assert message.startswith("The approval sent with this call was already used"), message
