"""Approvals that wait for a person: a call becomes a task until an approver decides it.

The view `ops` serves `wipe` (destructive) and `look` (read-only) with `"confirm":
"destructive"` and approvers alice, bob and dave (author keys), and erin (a call key, so not
an approver after all). dave calls through the view: his own calls wait for alice or bob.
carol is an author key no view lists. The webhook receiver is a real HTTP server on
127.0.0.1:0 that verifies Standard Webhooks signatures with the reference library and
refuses a message id it has seen; its first answer is a 503, so Kiln's retry is seen too.

Runs are counted from the runner's own log records; the caller is the official SDK (mcp 1.x,
tasks, no elicitation) in its own process, or raw 2026-07-28 requests.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from standardwebhooks import Webhook, WebhookVerificationError

from kiln.tasks.settings import TaskSettings
from support import toolchain
from support.app import META_CAPS, McpServer, meta, start_kiln, write_tool
from support.runs import Runs, counting_runs

CACHE = Path(os.environ.get("MCP_YARDSTICK_CACHE", Path.home() / ".cache" / "mcp-yardsticks"))
SDK_VENV = CACHE / "py-mcp-1.30.0"  # the yardsticks' venv of mcp 1.30 (tasks, no elicitation)
CLIENT = Path(__file__).with_name("sdk_waiting_client.py")
SECRET = "whsec_" + base64.b64encode(b"kiln-approvals-test-secret-32byt").decode()
TASKS = "io.modelcontextprotocol/tasks"
WIPE = "import json, sys\nargs = json.load(sys.stdin)\nprint(f\"wiped {args['target']}\")\n"
SCHEMA = {"type": "object", "properties": {"target": {"type": "string"}}, "required": ["target"]}


class Receiver:
    """A webhook endpoint: verifies, refuses replays, records what it accepted."""

    def __init__(self) -> None:
        self.accepted: list[dict[str, Any]] = []
        self.tries: list[dict[str, str]] = []
        self.seen: set[str] = set()
        self.fail_first = True
        self.arrived = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["content-length"]))
                status = receiver.receive(body, {k.lower(): v for k, v in self.headers.items()})
                self.send_response(status)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks/kiln"

    def receive(self, body: bytes, headers: dict[str, str]) -> int:
        """The documented rule: a bad signature or a timestamp more than 5 minutes off is
        401 (the library's check), a webhook-id already accepted is 409."""
        with self.arrived:
            self.tries.append(headers)
            if self.fail_first:
                self.fail_first = False
                return 503
            try:
                payload = Webhook(SECRET).verify(body, headers)
            except WebhookVerificationError:
                return 401
            if headers["webhook-id"] in self.seen:
                return 409
            self.seen.add(headers["webhook-id"])
            self.accepted.append(payload)
            self.arrived.notify_all()
            return 204

    def wait_for(self, approval_id: str) -> dict[str, Any]:
        with self.arrived:
            found = self.arrived.wait_for(
                lambda: next((p for p in self.accepted if p["data"]["id"] == approval_id), None),
                timeout=60,
            )
        assert found, f"no webhook for {approval_id}; tries: {self.tries}"
        return dict(found)


@pytest.fixture(scope="module")
def hook() -> Iterator[Receiver]:
    receiver = Receiver()
    thread = threading.Thread(target=receiver.server.serve_forever, daemon=True)
    thread.start()
    yield receiver
    receiver.server.shutdown()
    receiver.server.server_close()


def _tools(tmp: Path) -> list[Path]:
    tools = tmp / "tools"
    plain = {"description": "Wipes a target.", "input_schema": SCHEMA}
    return [
        write_tool(tools, "wipe", {**plain, "annotations": {"destructiveHint": True}}, WIPE),
        write_tool(tools, "look", {**plain, "annotations": {"readOnlyHint": True}}, WIPE),
        write_tool(tools, "purge", {**plain, "annotations": {"destructiveHint": True}}, WIPE),
    ]


class Team:
    """The view, and a key for each person."""

    def __init__(self, server: McpServer) -> None:
        self.server = server
        view = {"name": "ops", "tools": ["wipe", "look", "purge"], "confirm": "destructive",
                "approvers": ["alice", "bob", "dave", "erin"]}  # fmt: skip
        made = server.running.api("POST", "/api/views", json=view)
        assert made.status_code == 201, made.text
        self.keys = {name: self._key(name, scope) for name, scope in (
            ("alice", "author"), ("bob", "author"), ("carol", "author"), ("dave", "author"),
            ("erin", "call"), ("frank", "call"))}  # fmt: skip
        for caller in ("dave", "frank"):
            bound = server.running.api(
                "PUT", f"/api/keys/{caller}/binding", json={"view": "ops", "quota": {}}
            )
            assert bound.status_code == 200, bound.text

    def _key(self, name: str, scope: str) -> str:
        made = self.server.running.api("POST", "/api/keys", json={"name": name, "scope": scope})
        assert made.status_code == 201, made.text
        return str(made.json()["key"])

    def api(self, who: str, method: str, path: str, **kw: Any) -> Any:
        return self.server.running.api(method, path, key=self.keys[who], **kw)


@pytest.fixture(scope="module")
def server(
    moto_endpoint: str, tmp_path_factory: pytest.TempPathFactory, hook: Receiver
) -> Iterator[McpServer]:
    tmp = tmp_path_factory.mktemp("approvals-wait")
    tasks = TaskSettings(
        approval_webhook_url=hook.url, approval_webhook_secret=SECRET,
        approval_webhook_backoff_s=0.2,
    )  # fmt: skip
    yield from start_kiln(moto_endpoint, tmp, extra=_tools(tmp), tasks=tasks)


@pytest.fixture(scope="module")
def team(server: McpServer) -> Team:
    return Team(server)


@pytest.fixture
def runs() -> Iterator[Runs]:
    with counting_runs() as counter:
        yield counter


@pytest.fixture
def audit() -> Iterator[list[dict[str, Any]]]:
    lines: list[dict[str, Any]] = []

    class Lines(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(json.loads(record.getMessage()))

    handler = Lines()
    logging.getLogger("kiln.audit").addHandler(handler)
    yield lines
    logging.getLogger("kiln.audit").removeHandler(handler)


def rpc(team: Team, who: str, method: str, *, tasks: bool = True, **params: Any) -> Any:
    """A 2026-07-28 request as `who` (with the tasks extension unless `tasks` is False)."""
    caps = {"extensions": {TASKS: {}}} if tasks else {}
    params["_meta"] = {**meta(), META_CAPS: caps}
    name = params.get("name") or params.get("taskId")
    headers = {"Authorization": f"Bearer {team.keys[who]}"}
    response = team.server.modern(method, params, headers=headers, name=name)
    assert response.status_code == 200, response.text
    body = response.json()
    assert "result" in body, body
    return body["result"]


def until(team: Team, task_id: str, *statuses: str) -> dict[str, Any]:
    deadline = time.monotonic() + 90  # a wait on a loaded machine, not a speed claim
    task: dict[str, Any] = {}
    while time.monotonic() < deadline:
        task = rpc(team, "dave", "tasks/get", taskId=task_id)
        if task["status"] in statuses:
            return task
        time.sleep(0.1)
    raise AssertionError(f"task {task_id} never reached {statuses}: {task}")


def ledger(team: Team, tool: str = "wipe") -> list[dict[str, Any]]:
    found = team.server.running.api("GET", "/api/calls", params={"limit": 200})
    assert found.status_code == 200, found.text
    return [e for e in found.json()["calls"] if e["caller"] == "key:dave" and e["tool"] == tool]


def approval_of(task: dict[str, Any]) -> str:
    return str(task["_meta"]["kiln/approval"]["id"])


# ------------------------------------------------------------------ the flow


def test_an_unattended_sdk_callers_call_waits_for_an_approver_then_runs_once(
    team: Team, runs: Runs, audit: list[dict[str, Any]], hook: Receiver
) -> None:
    SDK = toolchain.python_venv(SDK_VENV, "mcp==1.30.0")  # made here if no test made it yet
    caller = subprocess.Popen(
        [str(SDK), str(CLIENT), team.server.url, team.keys["dave"], "wipe", '{"target": "db1"}'],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert caller.stdout is not None
        created = json.loads(caller.stdout.readline() or "{}")
        assert created.get("status") == "working", caller.stderr.read() if caller.stderr else ""
        approval = created["meta"]["kiln/approval"]
        assert approval["approvers"] == ["alice", "bob", "dave", "erin"]
        assert "alice or bob or dave or erin must approve this call" in created["statusMessage"]
        assert approval["id"] in created["statusMessage"]
        shown = team.api("alice", "GET", "/api/approvals").json()["approvals"]
        mine = next(a for a in shown if a["id"] == approval["id"])
        assert mine["tool"] == "wipe"
        assert mine["arguments"] == {"target": "db1"}
        assert mine["caller"] == "key:dave"
        assert mine["state"] == "pending"
        assert mine["revision"] == 1
        assert mine["created_at"].endswith("Z")
        assert runs.of.get("wipe", 0) == 0  # nothing runs before someone approves

        path = f"/api/approvals/{approval['id']}/approve"
        for who, why in (("carol", "you are not one of them"), ("dave", "their own call"),
                         ("erin", "not an author key")):  # fmt: skip
            refused = team.api(who, "POST", path)
            assert refused.status_code in (403, 404), refused.text
            if refused.status_code == 403:
                assert why in refused.json()["error"]["message"], refused.text
        assert team.api("carol", "GET", "/api/approvals").json()["approvals"] == []

        approved = team.api("alice", "POST", path)
        assert approved.status_code == 200, approved.text
        assert approved.json()["state"] == "approved"
        again = team.api("bob", "POST", path)
        assert again.status_code == 409, again.text
        assert "already approved by alice" in again.json()["error"]["message"]

        out, err = caller.communicate(timeout=120)
        assert caller.returncode == 0, err[-3000:]
    finally:
        if caller.poll() is None:
            caller.kill()
            caller.communicate()
    ended = json.loads(out.strip().splitlines()[-1])
    assert ended["statuses"][-1] == "completed", ended
    assert ended["result"]["content"][0]["text"].startswith("wiped db1"), ended
    assert runs.of.get("wipe") == 1
    entry = next(e for e in ledger(team) if "approved by alice" in (e.get("detail") or ""))
    assert entry["outcome"] == "ok"
    said = [(line["audit"], line["created_by"]) for line in audit]
    assert ("approval.approve", "key:alice") in said
    assert ("approval.refuse", "key:carol") in said
    assert ("approval.refuse", "key:dave") in said

    delivered = hook.wait_for(approval["id"])
    assert delivered["type"] == "approval.pending"
    assert delivered["data"]["tool"] == "wipe"
    assert delivered["data"]["caller"] == "key:dave"
    assert delivered["data"]["links"]["approve"].endswith(path)
    ids = [t["webhook-id"] for t in hook.tries if t["webhook-id"] == f"msg_{approval['id']}"]
    assert len(ids) >= 1


def test_a_replayed_approval_or_worker_start_never_runs_the_call_twice(
    team: Team, runs: Runs, server: McpServer
) -> None:
    task = rpc(team, "dave", "tools/call", name="wipe", arguments={"target": "db2"})
    assert task["resultType"] == "task"
    assert task["status"] == "working"
    approval_id = approval_of(task)
    kiln = server.running.kiln
    item = next(a for a in kiln.approval_store.listed() if a.id == approval_id)
    import asyncio

    # A worker started before anyone approved: it runs nothing.
    assert asyncio.run(kiln.task_worker.run(item.owner, item.task_id)) == "working"
    path = f"/api/approvals/{approval_id}/approve"
    assert team.api("bob", "POST", path).status_code == 200
    done = until(team, task["taskId"], "completed", "failed")
    assert done["result"]["content"][0]["text"].startswith("wiped db2")
    replayed = team.api("bob", "POST", path)  # the same approval sent again
    assert replayed.status_code == 409, replayed.text
    assert asyncio.run(kiln.task_worker.run(item.owner, item.task_id)) == "completed"
    assert kiln.approval_store.claim_run(approval_id).done is False
    assert runs.of.get("wipe") == 1


def test_a_denied_call_ends_unrun_saying_who_denied_it_and_why(
    team: Team, runs: Runs, audit: list[dict[str, Any]]
) -> None:
    task = rpc(team, "dave", "tools/call", name="wipe", arguments={"target": "db3"})
    approval_id = approval_of(task)
    denied = team.api(
        "bob", "POST", f"/api/approvals/{approval_id}/deny", json={"reason": "not on a Friday"}
    )
    assert denied.status_code == 200, denied.text
    done = until(team, task["taskId"], "completed", "failed")
    assert done["result"]["isError"] is True
    assert done["result"]["content"][0]["text"] == (
        "Tool 'wipe' was not run: bob denied its approval: not on a Friday"
    )
    assert team.api("alice", "POST", f"/api/approvals/{approval_id}/approve").status_code == 409
    assert runs.of.get("wipe", 0) == 0
    entry = next(e for e in ledger(team) if "denied by bob" in (e.get("detail") or ""))
    assert entry["outcome"] == "refused"
    assert entry["detail"] == "approval denied by bob: not on a Friday"
    assert any(line["audit"] == "approval.deny" for line in audit)


def test_a_client_without_tasks_is_told_the_approval_is_pending_and_gets_the_result_later(
    team: Team, runs: Runs
) -> None:
    same = {"target": "x"}
    first = rpc(team, "dave", "tools/call", tasks=False, name="wipe", arguments=same)
    assert first["isError"] is True
    text = first["content"][0]["text"]
    approval_id = first["_meta"]["kiln/approval"]["id"]
    assert "Waiting for a person's approval" in text
    assert approval_id in text
    assert "Call wipe again with the same arguments" in text
    second = rpc(team, "dave", "tools/call", tasks=False, name="wipe", arguments={"target": "x"})
    assert second["_meta"]["kiln/approval"]["id"] == approval_id  # the same call, not a new one
    assert team.api("alice", "POST", f"/api/approvals/{approval_id}/approve").status_code == 200
    deadline = time.monotonic() + 90
    answer: dict[str, Any] = second
    while answer.get("isError") and time.monotonic() < deadline:
        time.sleep(0.2)
        answer = rpc(
            team, "dave", "tools/call", tasks=False, name="wipe", arguments={"target": "x"}
        )
    assert answer.get("isError") is not True, answer
    assert answer["content"][0]["text"].startswith("wiped x")
    assert runs.of.get("wipe") == 1
    fresh = rpc(team, "dave", "tools/call", tasks=False, name="wipe", arguments={"target": "x"})
    assert fresh["_meta"]["kiln/approval"]["id"] != approval_id  # answered: a new call waits anew


def test_a_2025_client_without_tasks_is_told_the_same_and_nothing_runs(
    team: Team, runs: Runs
) -> None:
    message = {"jsonrpc": "2.0", "id": 7, "method": "tools/call",
               "params": {"name": "wipe", "arguments": {"target": "old"}}}  # fmt: skip
    headers = {"MCP-Protocol-Version": "2025-06-18", "Authorization": f"Bearer {team.keys['dave']}"}
    answer = team.server.post(message, headers)
    assert answer.status_code == 200, answer.text
    result = answer.json()["result"]
    assert result["isError"] is True
    assert result["content"][0]["text"].startswith("Waiting for a person's approval: alice or bob")
    assert result["_meta"]["kiln/approval"]["approvers"] == ["alice", "bob", "dave", "erin"]
    assert runs.of.get("wipe", 0) == 0


def test_a_read_only_tool_and_an_author_outside_the_view_never_wait(team: Team) -> None:
    looked = rpc(team, "dave", "tools/call", tasks=False, name="look", arguments={"target": "y"})
    assert looked["content"][0]["text"].startswith("wiped y")  # read-only: not covered
    plain = team.server.running.api("GET", "/api/approvals", key=team.keys["carol"])
    assert plain.json() == {"approvals": []}


def test_an_approval_checks_the_policy_again_and_refuses_a_changed_tool_or_a_revoked_key(
    team: Team, runs: Runs
) -> None:
    task = rpc(team, "dave", "tools/call", name="purge", arguments={"target": "p1"})
    approval_id = approval_of(task)
    changed = {"name": "purge", "description": "Purges a target, now more thoroughly.",
               "language": "python", "code": WIPE, "input_schema": SCHEMA,
               "annotations": {"destructiveHint": True}}  # fmt: skip
    saved = team.server.running.api(
        "PUT", "/api/tools/purge", headers={"If-Match": '"1"'}, json=changed
    )
    assert saved.status_code == 200, saved.text  # purge is at revision 2 now
    refused = team.api("alice", "POST", f"/api/approvals/{approval_id}/approve")
    assert refused.status_code == 409, refused.text
    said = refused.json()["error"]["message"]
    assert said == (
        f"approval {approval_id} was not given: tool 'purge' changed since the call "
        "(revision 1, now 2): the caller must call it again"
    )
    done = until(team, task["taskId"], "completed", "failed")
    assert done["result"]["isError"] is True
    assert "its approval was refused: tool 'purge' changed" in done["result"]["content"][0]["text"]

    frank = rpc(team, "frank", "tools/call", name="wipe", arguments={"target": "f1"})
    revoked = team.server.running.api("DELETE", "/api/keys/frank")
    assert revoked.status_code == 200, revoked.text
    late = team.api("alice", "POST", f"/api/approvals/{approval_of(frank)}/approve")
    assert late.status_code == 409, late.text
    assert "the caller's key 'frank' was revoked since the call" in late.json()["error"]["message"]
    assert runs.of.get("purge", 0) == 0
    assert runs.of.get("wipe", 0) == 0


def test_a_keys_own_approvers_make_its_calls_wait_whatever_view_it_reaches(team: Team) -> None:
    api = team.server.running.api
    refused = api("POST", "/api/keys", json={"name": "gina-x", "approvers": ["bob"]})
    assert refused.status_code == 422, refused.text
    assert 'approvers: needs "confirm" beside it' in refused.json()["error"]["message"]
    body = {"name": "gina", "scope": "call", "confirm": "writes", "approvers": ["bob"]}
    made = api("POST", "/api/keys", json=body)
    assert made.status_code == 201, made.text
    assert made.json()["approvers"] == ["bob"]
    team.keys["gina"] = made.json()["key"]
    task = rpc(team, "gina", "tools/call", name="wipe", arguments={"target": "g1"})
    assert task["_meta"]["kiln/approval"]["approvers"] == ["bob"]
    path = f"/api/approvals/{approval_of(task)}/approve"
    assert team.api("alice", "POST", path).status_code == 403  # the key names bob, not her
    assert team.api("bob", "POST", path).status_code == 200
    deadline = time.monotonic() + 90
    while task["status"] == "working" and time.monotonic() < deadline:
        time.sleep(0.1)
        task = rpc(team, "gina", "tasks/get", taskId=task["taskId"])
    assert task["result"]["content"][0]["text"].startswith("wiped g1"), task
    cleared = api("PUT", "/api/keys/gina/binding", json={"confirm": "writes"})
    assert cleared.json()["approvers"] == []  # left out: cleared, as view and quota are


def test_a_call_its_caller_cancelled_is_not_approved_after_all(team: Team, runs: Runs) -> None:
    task = rpc(team, "dave", "tools/call", name="wipe", arguments={"target": "gone"})
    rpc(team, "dave", "tasks/cancel", taskId=task["taskId"])  # an ack
    assert until(team, task["taskId"], "cancelled")["status"] == "cancelled"
    refused = team.api("alice", "POST", f"/api/approvals/{approval_of(task)}/approve")
    assert refused.status_code == 409, refused.text
    assert "its caller cancelled the call" in refused.json()["error"]["message"]
    assert runs.of.get("wipe", 0) == 0


# ------------------------------------------------------------------ the webhook's rule


def test_the_webhook_is_signed_and_a_forged_or_replayed_message_is_refused(
    team: Team, hook: Receiver
) -> None:
    task = rpc(team, "dave", "tools/call", name="wipe", arguments={"target": "db4"})
    approval_id = approval_of(task)
    payload = hook.wait_for(approval_id)
    assert payload["data"]["arguments"] == {"target": "db4"}
    body = json.dumps(payload).encode()
    now = datetime.now(UTC)
    signer = Webhook(SECRET)

    def post(message_id: str, at: datetime, data: bytes, signature: str | None = None) -> int:
        import httpx

        headers = {
            "webhook-id": message_id,
            "webhook-timestamp": str(int(at.timestamp())),
            "webhook-signature": signature or signer.sign(message_id, at, data),
        }
        return httpx.post(hook.url, content=data, headers=headers).status_code

    forged = Webhook("whsec_" + base64.b64encode(b"x" * 32).decode())
    assert post("msg_forged", now, body, forged.sign("msg_forged", now, body)) == 401
    assert post(f"msg_{approval_id}", now, body) == 409  # its id was accepted already
    old = datetime.fromtimestamp(now.timestamp() - 600, UTC)
    assert post("msg_old", old, body) == 401  # more than five minutes old
    tampered = body.replace(b"db4", b"db5")
    delivered = [t for t in hook.tries if t["webhook-id"] == f"msg_{approval_id}"][-1]
    assert post(f"msg_{approval_id}-b", now, tampered, delivered["webhook-signature"]) == 401
    assert team.api("bob", "POST", f"/api/approvals/{approval_id}/deny").status_code == 200


# ------------------------------------------------------------------ the command line


def kiln(team: Team, who: str, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "kiln.cli", *args]
    command += ["--url", team.server.running.url, "--key", team.keys[who]]
    env = {k: v for k, v in os.environ.items() if not k.startswith("KILN_")}
    return subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)


def test_kiln_approvals_lists_approves_and_denies_with_the_servers_reasons(
    team: Team, runs: Runs
) -> None:
    one = approval_of(rpc(team, "dave", "tools/call", name="wipe", arguments={"target": "c1"}))
    two = approval_of(rpc(team, "dave", "tools/call", name="wipe", arguments={"target": "c2"}))
    listed = kiln(team, "alice", "approvals", "ls")
    assert listed.returncode == 0, listed.stderr
    assert one in listed.stdout
    assert "wipe@1" in listed.stdout
    assert '{"target": "c1"}  by key:dave' in listed.stdout
    approved = kiln(team, "alice", "approvals", "approve", one)
    assert approved.returncode == 0, approved.stderr
    assert approved.stdout.startswith(f"{one} approved by alice")
    replayed = kiln(team, "bob", "approvals", "approve", one)
    assert replayed.returncode == 1
    assert f"approval {one} was already approved by alice" in replayed.stderr
    denied = kiln(team, "bob", "approvals", "deny", two, "--reason", "wrong db")
    assert denied.returncode == 0, denied.stderr
    not_yours = kiln(team, "carol", "approvals", "approve", two)
    assert not_yours.returncode == 1
    assert "HTTP 403" in not_yours.stderr or "403" in not_yours.stderr, not_yours.stderr
    pending = kiln(team, "alice", "approvals", "ls").stdout
    assert one not in pending
    assert two not in pending
    decided = kiln(team, "alice", "approvals", "ls", "--all").stdout
    assert f"{two}  denied" in decided
