"""Progress and logs across the runner hop: the public function sends each run to the runner
function, which answers with the run's result and what it said while it ran; the public
function emits those as the wire's notifications before the result (Mangum buffers the body,
so on Lambda they arrive together with it), and a task's worker makes the last progress its
status message.

The `mcp` and `worker` functions run under awslambdaric (`start_lambda`); the runner function
is the tenant-isolated stand-in of `lambda_profile.py` (sandboxed environments, one per tool),
reached through `KILN_RUNNER_ENDPOINT_URL` as the template wires it.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.lambda_profile import TenantInvoke
from e2e.test_lambda_runtime import LambdaProcess, answer_body, event_for, rpc, start_lambda
from e2e.test_lambda_tasks import WORKER, LambdaApi
from kiln.authoring import AuthoringService, FolderTarget
from kiln.aws.clients import ensure_resources, make_clients
from kiln.catalog.files import push, tool_folders
from kiln.catalog.rules import check_draft
from kiln.catalog.store import CatalogStore

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the profile's sandbox needs root")

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "examples" / "conformance"
MODERN = "2026-07-28"
STEPS = {
    "name": "e2e_steps",
    "description": "Three steps, each reported as progress, then done: runs as an MCP task.",
    "language": "python",
    "code": (
        "import json, os, sys\n"
        "talk = os.fdopen(int(os.environ['KILN_TALK_FD']), 'w', buffering=1)\n"
        "json.load(sys.stdin)\n"
        "for step in (1, 2, 3):\n"
        "    said = {'progress': step, 'total': 3, 'message': f'step {step}'}\n"
        "    talk.write(json.dumps(said) + '\\n')\n"
        "    talk.write(json.dumps({'log': 'info', 'data': f'did step {step}'}) + '\\n')\n"
        "print('three steps done')\n"
    ),
    "input_schema": {"type": "object"},
    "timeout_seconds": 60,
    "task": "optional",
}


@pytest.fixture(scope="module")
def stack(
    moto_endpoint: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[LambdaProcess, LambdaProcess, TenantInvoke, LambdaApi, dict[str, str]]]:
    table = bucket = f"kiln-e2e-hop-{uuid.uuid4().hex[:10]}"
    clients = make_clients(endpoint_url=moto_endpoint, region="us-east-1")
    ensure_resources(clients, table=table, bucket=bucket)
    store = CatalogStore(clients.dynamodb, clients.s3, table=table, bucket=bucket)
    folders = [f for f in tool_folders(FIXTURES) if f.name.startswith("test_tool_with_")]
    push(FolderTarget(AuthoringService(store)), folders)
    ids = {name: store.get(name).id for name in ("test_tool_with_progress",
                                                     "test_tool_with_logging")}  # fmt: skip
    ids["e2e_steps"] = store.create(check_draft(STEPS), actor="e2e").id
    tmp = tmp_path_factory.mktemp("hop")
    tmp.chmod(0o755)
    store_env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                 "AWS_ENDPOINT_URL": moto_endpoint, "KILN_TABLE": table,
                 "KILN_BUCKET": bucket}  # fmt: skip
    runners = TenantInvoke(tmp / "runner", "runner", store_env, [moto_endpoint])
    for place in ("mcp", "worker"):
        (tmp / place).mkdir()
    hop = {"KILN_RUNNER_FUNCTION": "kiln-runner", "KILN_RUNNER_ENDPOINT_URL": runners.url}
    try:
        for api in LambdaApi().serve():
            public_env = {**hop, "KILN_WORKER_FUNCTION": WORKER, "AWS_ENDPOINT_URL_LAMBDA": api.url}
            for public in start_lambda(tmp / "mcp", moto_endpoint, table, bucket,
                                       extra_env=public_env):  # fmt: skip
                for worker in start_lambda(tmp / "worker", moto_endpoint, table, bucket,
                                           handler="worker", extra_env=hop):  # fmt: skip
                    yield public, worker, runners, api, ids
    finally:
        runners.close()


def events_of(response: dict[str, Any]) -> list[dict[str, Any]]:
    assert response["statusCode"] == 200, response
    assert response["headers"]["content-type"] == "text/event-stream", response
    return [
        json.loads(line.removeprefix("data: "))
        for line in response["body"].splitlines()
        if line.startswith("data: ")
    ]


def call(public: LambdaProcess, name: str, meta: dict[str, Any], **headers: str) -> Any:
    message = rpc("tools/call", {"name": name, "arguments": {}, "_meta": meta})
    event = event_for("http-api-tools-call.json", message)
    event["headers"].update(headers)
    answer = public.invoke(event, timeout_s=60)
    assert answer.kind == "response", f"{answer.payload}\n--- mcp log:\n{public.log()}"
    return answer.payload


def test_progress_from_the_runner_function_arrives_as_2025_events_before_the_result(
    stack: Any,
) -> None:
    public, _, runners, _, ids = stack
    events = events_of(call(public, "test_tool_with_progress", {"progressToken": 7}))
    progress = [e["params"] for e in events if e.get("method") == "notifications/progress"]
    assert [(p["progressToken"], p["progress"], p["total"]) for p in progress] == [
        (7, 0, 100), (7, 50, 100), (7, 100, 100),
    ], events  # fmt: skip
    assert [p["message"] for p in progress] == ["0% done", "50% done", "100% done"]
    assert events[-1]["result"]["content"][0]["text"] == "Progress test completed"
    assert "method" not in events[-1]  # the result comes last
    # It ran in the runner function, in the tool's own environment (its tenant).
    assert ids["test_tool_with_progress"] in [tenant for tenant, _ in runners.served]


def test_logs_from_the_runner_function_arrive_as_2025_events_before_the_result(
    stack: Any,
) -> None:
    public, _, runners, _, ids = stack
    events = events_of(call(public, "test_tool_with_logging", {}))
    logs = [e["params"] for e in events if e.get("method") == "notifications/message"]
    assert [(log["level"], log["data"]) for log in logs] == [
        ("info", "Tool execution started"),
        ("info", "Tool processing data"),
        ("info", "Tool execution completed"),
    ], events
    assert events[-1]["result"]["content"][0]["text"] == "Logging test completed"
    assert ids["test_tool_with_logging"] in [tenant for tenant, _ in runners.served]


def test_progress_from_the_runner_function_arrives_on_2026_07_28_too(stack: Any) -> None:
    public, _, _, _, _ = stack
    meta = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
        "progressToken": "p1",
    }
    headers = {"mcp-protocol-version": MODERN, "mcp-method": "tools/call",
               "mcp-name": "test_tool_with_progress"}  # fmt: skip
    events = events_of(call(public, "test_tool_with_progress", meta, **headers))
    progress = [e["params"]["progress"] for e in events if e.get("method")]
    assert progress == [0, 50, 100], events
    assert events[-1]["result"]["content"][0]["text"] == "Progress test completed"


def test_a_tasks_run_in_the_runner_function_leaves_its_last_progress_as_status_message(
    stack: Any,
) -> None:
    public, worker, runners, api, ids = stack
    made = answer_body(public.invoke(event_for("http-api-tools-call.json", rpc(
        "tools/call", {"name": "e2e_steps", "arguments": {}, "task": {"ttl": 600_000}}
    ))))  # fmt: skip
    task_id = made["result"]["task"]["taskId"]
    (invoked,) = [c for c in api.calls if c.payload["kiln_task"]["id"] == task_id]
    ran = worker.invoke(invoked.payload, timeout_s=90)
    assert ran.kind == "response", f"{ran.payload}\n--- worker log:\n{worker.log()}"
    assert ran.payload == {"task": task_id, "status": "completed"}, worker.log()
    got = answer_body(public.invoke(event_for("http-api-tools-call.json",
                                              rpc("tasks/get", {"taskId": task_id}))))  # fmt: skip
    task = got["result"]
    assert task["status"] == "completed", task
    assert task["statusMessage"] == "3 of 3: step 3", task
    assert ids["e2e_steps"] in [tenant for tenant, _ in runners.served]
