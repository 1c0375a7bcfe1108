"""An MCP task through both Lambda functions, driven as Lambda drives them.

The public function (`kiln.lambda_handlers.mcp`) and the worker (`kiln.lambda_handlers.worker`)
each run under the real runtime interface client (awslambdaric) in their own process, with a
Runtime API stand-in each. The public function's asynchronous `Invoke` of the worker goes to a
stand-in for the Lambda API (AWS_ENDPOINT_URL_LAMBDA), which records it; the test then hands
that payload to the worker function, as Lambda's event queue would.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from e2e.test_lambda_runtime import LambdaProcess, answer_body, event_for, rpc, start_lambda
from kiln.aws.clients import ensure_resources, make_clients
from kiln.catalog.rules import check_draft
from kiln.catalog.store import CatalogStore

WORKER = "kiln-e2e-worker"
LONG = {
    "name": "e2e_long",
    "description": "A long job: runs as an MCP task.",
    "language": "python",
    "code": (
        "import json, sys, time\n"
        "args = json.load(sys.stdin)\n"
        "time.sleep(1)\n"
        "print(f\"long job done for {args['who']}\")\n"
    ),
    "input_schema": {"type": "object", "properties": {"who": {"type": "string"}}},
    "timeout_seconds": 600,
    "task": "optional",
}


@dataclass
class Invocation:
    function: str
    invocation_type: str
    payload: dict[str, Any]


@dataclass
class LambdaApi:
    """Records `Invoke` calls (POST /2015-03-31/functions/<name>/invocations) and says 202."""

    calls: list[Invocation] = field(default_factory=list)
    server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def serve(self) -> Iterator[LambdaApi]:
        calls = self.calls

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return None

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                body = self.rfile.read(length)
                parts = self.path.split("/")  # /2015-03-31/functions/<name>/invocations
                calls.append(
                    Invocation(
                        parts[3],
                        self.headers.get("x-amz-invocation-type", "RequestResponse"),
                        json.loads(body),
                    )
                )
                self.send_response(202)
                self.send_header("content-length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self.server.shutdown()
            self.server.server_close()


@pytest.fixture(scope="module")
def catalog(moto_endpoint: str) -> tuple[str, str]:
    suffix = uuid.uuid4().hex[:10]
    table = bucket = f"kiln-e2e-tasks-{suffix}"
    clients = make_clients(endpoint_url=moto_endpoint, region="us-east-1")
    ensure_resources(clients, table=table, bucket=bucket)
    store = CatalogStore(clients.dynamodb, clients.s3, table=table, bucket=bucket)
    store.create(check_draft(LONG), actor="e2e")
    return table, bucket


@pytest.fixture(scope="module")
def lambda_api() -> Iterator[LambdaApi]:
    yield from LambdaApi().serve()


@pytest.fixture(scope="module")
def public(
    catalog: tuple[str, str],
    moto_endpoint: str,
    lambda_api: LambdaApi,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[LambdaProcess]:
    table, bucket = catalog
    env = {"KILN_WORKER_FUNCTION": WORKER, "AWS_ENDPOINT_URL_LAMBDA": lambda_api.url}
    tmp = tmp_path_factory.mktemp("public")
    yield from start_lambda(tmp, moto_endpoint, table, bucket, extra_env=env)


@pytest.fixture(scope="module")
def worker(
    catalog: tuple[str, str], moto_endpoint: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LambdaProcess]:
    table, bucket = catalog
    tmp = tmp_path_factory.mktemp("worker")
    yield from start_lambda(tmp, moto_endpoint, table, bucket, handler="worker")


def mcp(public: LambdaProcess, method: str, params: dict[str, Any]) -> dict[str, Any]:
    body = answer_body(public.invoke(event_for("http-api-tools-call.json", rpc(method, params))))
    assert "result" in body, body
    result: dict[str, Any] = body["result"]
    return result


def test_a_task_is_created_run_by_the_worker_function_and_read_back(
    public: LambdaProcess, worker: LambdaProcess, lambda_api: LambdaApi, tmp_path: Path
) -> None:
    created = mcp(
        public,
        "tools/call",
        {"name": "e2e_long", "arguments": {"who": "e2e"}, "task": {"ttl": 600_000}},
    )["task"]
    assert created["status"] == "working"
    task_id = created["taskId"]
    assert mcp(public, "tasks/get", {"taskId": task_id})["status"] == "working"
    # A held invocation is billed by the millisecond: no 20 s of polling in Lambda.
    asked = time.monotonic()
    waiting = public.invoke(
        event_for("http-api-tools-call.json", rpc("tasks/result", {"taskId": task_id}))
    )
    assert time.monotonic() - asked < 5
    assert "poll tasks/get" in json.loads(waiting.payload["body"])["error"]["message"]

    (invoked,) = lambda_api.calls
    assert invoked.function == WORKER
    assert invoked.invocation_type == "Event"  # asynchronous: the request does not wait
    assert invoked.payload["kiln_task"]["id"] == task_id

    ran = worker.invoke(invoked.payload, timeout_s=60)
    assert ran.kind == "response", ran.payload
    assert ran.payload == {"task": task_id, "status": "completed"}

    done = mcp(public, "tasks/get", {"taskId": task_id})
    assert done["status"] == "completed"
    result = mcp(public, "tasks/result", {"taskId": task_id})
    assert result["content"][0]["text"].strip() == "long job done for e2e"
    assert result["_meta"]["io.modelcontextprotocol/related-task"] == {"taskId": task_id}


def test_a_worker_event_for_a_task_that_is_not_working_changes_nothing(
    public: LambdaProcess, worker: LambdaProcess, lambda_api: LambdaApi
) -> None:
    payload = {"kiln_task": {"owner": "0" * 32, "id": "no-such-task"}}
    ran = worker.invoke(payload, timeout_s=30)
    assert ran.payload == {"task": "no-such-task", "status": "missing"}
