"""A call that waits for a person's approval, through the three Lambda functions.

The public function (`mcp`) stores the waiting task, starts nothing, and hands the approval's
webhook to the worker function (an asynchronous invoke: a frozen container would finish no
background delivery), which delivers it signed to a receiver here; the admin function
(`admin`, REST) takes the approver's approval and invokes the worker asynchronously (a
stand-in for the Lambda API records the Invoke); the worker function (`worker`) moves the
approval to `running` and runs the call. The same worker event handed over again (Lambda's
queue delivering twice) runs nothing. Each function runs under the real runtime client, in
its sandbox, with template.yaml's role checked for every AWS call (`support.iam_roles`).
"""

from __future__ import annotations

import base64
import copy
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from standardwebhooks import Webhook

from e2e.test_lambda_runtime import EVENTS, LambdaProcess, event_for, rpc, start_lambda
from e2e.test_lambda_talk import body_of, modern_event
from e2e.test_lambda_tasks import LambdaApi
from kiln.access.view_store import ViewStore
from kiln.access.views import check_view
from kiln.authoring import AuthoringService
from kiln.catalog.store import CatalogStore
from kiln.identity.keys import KeyStore
from support.aws import AwsStack, fresh_stack

WORKER = "kiln-e2e-approvals-worker"
SECRET = "whsec_" + base64.b64encode(b"e2e-approvals-webhook-secret-32b").decode()
TASKS = {"io.modelcontextprotocol/clientCapabilities": {"extensions": {
    "io.modelcontextprotocol/tasks": {}}}}  # fmt: skip
WIPE = {
    "name": "wipe",
    "description": "Wipes a target.",
    "language": "python",
    "code": "import json, sys\nprint('wiped', json.load(sys.stdin)['target'])\n",
    "annotations": {"destructiveHint": True},
    "input_schema": {"type": "object", "properties": {"target": {"type": "string"}}},
}


@pytest.fixture(scope="module")
def received() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """A webhook receiver on 127.0.0.1:0: what it verified (Standard Webhooks) it keeps."""
    verified: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["content-length"]))
            verified.append(Webhook(SECRET).verify(body, dict(self.headers.items())))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/hook", verified
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def aws(moto_endpoint: str) -> AwsStack:
    return fresh_stack(moto_endpoint, "kiln-e2e-wait")


@pytest.fixture(scope="module")
def keys(aws: AwsStack) -> dict[str, str]:
    store = CatalogStore(aws.clients.dynamodb, aws.clients.s3, table=aws.table, bucket=aws.bucket)
    AuthoringService(store).create(WIPE, None)
    view = {"name": "ops", "tools": ["wipe"], "confirm": "destructive", "approvers": ["alice"]}
    ViewStore(aws.clients.dynamodb, table=aws.table).put(
        check_view(view), expected_revision=None, actor="e2e"
    )
    made = KeyStore(aws.clients.dynamodb, table=aws.table)
    _, alice = made.create("alice", "author")
    _, agent = made.create("agent", "call", view="ops")
    return {"alice": alice, "agent": agent}


@pytest.fixture(scope="module")
def functions(
    aws: AwsStack,
    keys: dict[str, str],
    moto_endpoint: str,
    tmp_path_factory: pytest.TempPathFactory,
    received: tuple[str, list[dict[str, Any]]],
) -> Iterator[tuple[LambdaProcess, LambdaProcess, LambdaProcess, LambdaApi]]:
    for api in LambdaApi().serve():
        hook = {"KILN_APPROVAL_WEBHOOK_URL": received[0], "KILN_APPROVAL_WEBHOOK_SECRET": SECRET}
        env = {"KILN_WORKER_FUNCTION": WORKER, "AWS_ENDPOINT_URL_LAMBDA": api.url, **hook}
        where = {n: tmp_path_factory.mktemp(f"wait-{n}") for n in ("mcp", "admin", "worker")}
        for public in start_lambda(where["mcp"], moto_endpoint, aws.table, aws.bucket,
                                   extra_env=env):  # fmt: skip
            for admin in start_lambda(where["admin"], moto_endpoint, aws.table, aws.bucket,
                                      handler="admin", extra_env=env):  # fmt: skip
                for worker in start_lambda(where["worker"], moto_endpoint, aws.table,
                                           aws.bucket, handler="worker",
                                           extra_env=hook):  # fmt: skip
                    yield public, admin, worker, api


def rest(admin: LambdaProcess, method: str, path: str, key: str) -> tuple[int, Any]:
    event = copy.deepcopy(json.loads((EVENTS / "http-api-admin-health.json").read_text()))
    event["rawPath"] = event["requestContext"]["http"]["path"] = path
    event["requestContext"]["http"]["method"] = method
    event["routeKey"] = event["requestContext"]["routeKey"] = "$default"
    event["headers"]["authorization"] = f"Bearer {key}"
    answer = admin.invoke(event)
    assert answer.kind == "response", answer.payload
    return int(answer.payload["statusCode"]), json.loads(answer.payload["body"] or "null")


def tasks_get(public: LambdaProcess, key: str, task_id: str) -> dict[str, Any]:
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", **TASKS}
    event = event_for("http-api-tools-call.json", rpc("tasks/get", {"taskId": task_id,
                                                                   "_meta": meta}))  # fmt: skip
    event["headers"].update({"mcp-protocol-version": "2026-07-28", "mcp-method": "tasks/get",
                             "mcp-name": task_id,
                             "authorization": f"Bearer {key}"})  # fmt: skip
    return dict(body_of(public, event)["result"])


def test_the_worker_function_runs_an_approved_call_once_and_a_redelivered_event_runs_nothing(
    functions: tuple[LambdaProcess, LambdaProcess, LambdaProcess, LambdaApi],
    keys: dict[str, str],
    received: tuple[str, list[dict[str, Any]]],
) -> None:
    public, admin, worker, api = functions
    event = modern_event("wipe", arguments={"target": "db"}, _meta=TASKS)
    event["headers"]["authorization"] = f"Bearer {keys['agent']}"
    created = body_of(public, event)["result"]
    assert created["resultType"] == "task", created
    assert created["status"] == "working"
    approval_id = created["_meta"]["kiln/approval"]["id"]
    (announced,) = api.calls  # the webhook's delivery, handed to the worker; no run
    assert announced.function == WORKER
    assert announced.invocation_type == "Event"
    assert announced.payload == {"kiln_approval": {"webhook": approval_id}}
    told = worker.invoke(announced.payload, timeout_s=60)
    assert told.payload == {"approval": approval_id, "delivered": True}, told.payload
    (payload,) = received[1]
    assert payload["data"]["id"] == approval_id
    assert payload["data"]["tool"] == "wipe"
    assert payload["data"]["caller"] == "key:agent"

    status, listed = rest(admin, "GET", "/api/approvals", keys["alice"])
    assert status == 200, listed
    assert [a["id"] for a in listed["approvals"]] == [approval_id]
    status, approved = rest(admin, "POST", f"/api/approvals/{approval_id}/approve", keys["alice"])
    assert status == 200, approved
    (invoked,) = api.calls[1:]
    assert invoked.function == WORKER
    assert invoked.invocation_type == "Event"

    ran = worker.invoke(invoked.payload, timeout_s=60)
    assert ran.kind == "response", ran.payload
    assert ran.payload["status"] == "completed", ran.payload
    again = worker.invoke(invoked.payload, timeout_s=60)  # delivered twice: nothing runs
    assert again.payload["status"] == "completed", again.payload
    status, replayed = rest(admin, "POST", f"/api/approvals/{approval_id}/approve", keys["alice"])
    assert status == 409, replayed
    assert len(api.calls) == 2

    done = tasks_get(public, keys["agent"], created["taskId"])
    assert done["status"] == "completed", done
    assert done["result"]["content"][0]["text"].strip() == "wiped db"
