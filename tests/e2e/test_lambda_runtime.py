"""The public handler driven as Lambda drives it: the real runtime interface client
(awslambdaric) in its own process, a local stand-in for the Runtime API handing it HTTP API v2
and Function URL events, and the catalog on a moto server over HTTP.

By default the function runs from the source tree on this interpreter. To drive what
`sam build` made instead (the function code plus the deps and Node layers, on the Lambda
runtime's Python), set KILN_E2E_BUILD to the build folder and KILN_E2E_PYTHON to a Python 3.13
that has only awslambdaric installed:

    KILN_E2E_BUILD=.aws-sam/build KILN_E2E_PYTHON=/path/to/py313/bin/python pytest tests/e2e
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kiln.aws.clients import ensure_resources, make_clients
from kiln.catalog.rules import check_draft
from kiln.catalog.store import CatalogStore

from .runtime_api import Answer, RuntimeApi

ROOT = Path(__file__).resolve().parents[2]
EVENTS = ROOT / "tests" / "events"
BUILD = os.environ.get("KILN_E2E_BUILD")
PYTHON = os.environ.get("KILN_E2E_PYTHON") or sys.executable


def code_env() -> dict[str, str]:
    """Where the function's code, its layers and Node come from: the build, or the sources."""
    if not BUILD:
        return {"PYTHONPATH": str(ROOT / "functions")}
    build = (ROOT / BUILD).resolve()
    return {
        # As Lambda lays them out: /var/task, then the layers' /opt/python.
        "PYTHONPATH": f"{build / 'McpFunction'}:{build / 'DepsLayer' / 'python'}",
        "KILN_NODE_BINARY": str(build / "NodeLayer" / "nodejs" / "bin" / "node"),
    }


PROTOCOL_VERSION = "2025-11-25"

HELLO = {
    "name": "e2e_hello",
    "description": "Greets by name and tells which process ran it.",
    "language": "python",
    "code": (
        "import json, os, sys\n"
        "args = json.load(sys.stdin)\n"
        "print(json.dumps({'hello': args.get('name', 'world'), 'pid': os.getpid()}))\n"
    ),
    "input_schema": {
        "type": "object",
        "properties": {"name": {"type": "string"}},
        "additionalProperties": False,
    },
}
NODE_HELLO = {
    "name": "e2e_node_hello",
    "description": "Greets by name from Node.js.",
    "language": "node",
    "code": (
        "const fs = require('node:fs');\n"
        "const args = JSON.parse(fs.readFileSync(0, 'utf8'));\n"
        "console.log(JSON.stringify({hello: args.name || 'world', node: process.version}));\n"
    ),
    "input_schema": {"type": "object", "properties": {"name": {"type": "string"}}},
}
SLEEPER = {
    "name": "e2e_sleeper",
    "description": "Sleeps far longer than any invocation in these tests has left.",
    "language": "python",
    "code": "import time\ntime.sleep(60)\nprint('woke up')\n",
    "timeout_seconds": 30,
}


@dataclass
class LambdaProcess:
    api: RuntimeApi
    process: subprocess.Popen[bytes]
    output: Path

    def alive(self) -> bool:
        return self.process.poll() is None

    def invoke(self, event: dict[str, Any], *, timeout_s: float = 20.0) -> Answer:
        return self.api.invoke(event, timeout_s=timeout_s, alive=self.alive)

    def records(self) -> list[dict[str, Any]]:
        """Every JSON line the function printed (Powertools logs and EMF metrics)."""
        found = []
        for line in self.output.read_text(errors="replace").splitlines():
            if line.startswith("{"):
                try:
                    found.append(json.loads(line))
                except ValueError:
                    continue
        return found


def event_for(name: str, message: dict[str, Any]) -> dict[str, Any]:
    """A captured event from tests/events with this JSON-RPC message as its body, sent now."""
    event = copy.deepcopy(json.loads((EVENTS / name).read_text()))
    event["body"] = json.dumps(message)
    event["requestContext"]["timeEpoch"] = int(time.time() * 1000)
    event["requestContext"]["requestId"] = uuid.uuid4().hex
    return event


def rpc(method: str, params: dict[str, Any], id_: int = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id_, "method": method, "params": params}


def answer_body(answer: Answer) -> dict[str, Any]:
    assert answer.kind == "response", answer.payload
    response = answer.payload
    assert response["statusCode"] == 200, response
    body: dict[str, Any] = json.loads(response["body"])
    return body


def call_text(body: dict[str, Any]) -> str:
    assert "result" in body, body
    return "\n".join(c["text"] for c in body["result"]["content"] if c["type"] == "text")


def value(emf: dict[str, Any], metric: str) -> float:
    """One metric's value in an EMF record (Powertools writes each as a list)."""
    found = emf[metric]
    (number,) = found if isinstance(found, list) else [found]
    return float(number)


def start_lambda(
    tmp: Path,
    endpoint: str,
    table: str,
    bucket: str,
    *,
    handler: str = "mcp",
    extra_env: dict[str, str] | None = None,
) -> Iterator[LambdaProcess]:
    output = tmp / "function-output.log"
    with RuntimeApi() as api, output.open("wb") as sink:
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(tmp),
            **code_env(),
            "AWS_LAMBDA_RUNTIME_API": api.address,
            "AWS_LAMBDA_FUNCTION_NAME": "kiln-e2e-mcp",
            "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
            "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "1024",
            "AWS_LAMBDA_LOG_GROUP_NAME": "/aws/lambda/kiln-e2e-mcp",
            "AWS_LAMBDA_LOG_STREAM_NAME": "e2e",
            "_HANDLER": f"kiln.lambda_handlers.{handler}",
            "AWS_REGION": "us-east-1",
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            # As a function's role session: the emulator's call log names the role by it, and
            # every call is checked against that role in template.yaml (tests/iam_roles.py).
            "AWS_SESSION_TOKEN": f"kiln-role/{handler}",
            "AWS_ENDPOINT_URL": endpoint,
            "KILN_TABLE": table,
            "KILN_BUCKET": bucket,
            "KILN_PUBLIC_ANONYMOUS": "true",
            "KILN_BUNDLE_CACHE_DIR": str(tmp / "bundles"),
            "POWERTOOLS_SERVICE_NAME": "kiln",
            "POWERTOOLS_METRICS_NAMESPACE": "Kiln",
            # Metrics written with each request (not batched per 10 s: kiln.observability
            # .metrics, tests/unit/observability), so that each test sees its own call's.
            "KILN_METRICS_FLUSH_S": "0",
            **(extra_env or {}),
        }
        process = subprocess.Popen(
            [PYTHON, "-m", "awslambdaric", f"kiln.lambda_handlers.{handler}"],
            env=env,
            cwd=tmp,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
        running = LambdaProcess(api, process, output)
        try:
            api.wait_ready(60, alive=running.alive)
            yield running
        finally:
            process.kill()
            process.wait(timeout=10)


@pytest.fixture(scope="module")
def catalog(moto_endpoint: str) -> tuple[str, str]:
    suffix = uuid.uuid4().hex[:10]
    table = bucket = f"kiln-e2e-{suffix}"
    clients = make_clients(endpoint_url=moto_endpoint, region="us-east-1")
    ensure_resources(clients, table=table, bucket=bucket)
    store = CatalogStore(clients.dynamodb, clients.s3, table=table, bucket=bucket)
    for tool in (HELLO, NODE_HELLO, SLEEPER):
        store.create(check_draft(tool), actor="e2e")
    return table, bucket


@pytest.fixture(scope="module")
def function(
    catalog: tuple[str, str], moto_endpoint: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LambdaProcess]:
    table, bucket = catalog
    yield from start_lambda(tmp_path_factory.mktemp("lambda"), moto_endpoint, table, bucket)


# The tests below share one function process, in file order: cold start first, then warm.


def test_initialize_is_answered_by_the_cold_function(function: LambdaProcess) -> None:
    params = {
        "protocolVersion": PROTOCOL_VERSION,
        "capabilities": {},
        "clientInfo": {"name": "e2e", "version": "1"},
    }
    body = answer_body(
        function.invoke(event_for("http-api-initialize.json", rpc("initialize", params)))
    )
    assert body["result"]["protocolVersion"] == PROTOCOL_VERSION
    assert "tools" in body["result"]["capabilities"]


def test_tools_list_shows_the_catalog(function: LambdaProcess) -> None:
    body = answer_body(
        function.invoke(event_for("http-api-tools-list.json", rpc("tools/list", {})))
    )
    names = {tool["name"] for tool in body["result"]["tools"]}
    assert names == {"e2e_hello", "e2e_node_hello", "e2e_sleeper"}


def test_tools_call_runs_the_script_in_a_child_process(function: LambdaProcess) -> None:
    message = rpc("tools/call", {"name": "e2e_hello", "arguments": {"name": "Lambda"}})
    body = answer_body(function.invoke(event_for("http-api-tools-call.json", message)))
    assert body["result"]["isError"] is False
    printed = json.loads(call_text(body))
    assert printed["hello"] == "Lambda"
    assert printed["pid"] != function.process.pid


def test_a_call_pinned_to_a_fingerprint_the_tool_no_longer_has_is_refused_unrun(
    function: LambdaProcess, catalog: tuple[str, str], moto_endpoint: str
) -> None:
    table, bucket = catalog
    clients = make_clients(endpoint_url=moto_endpoint, region="us-east-1")
    store = CatalogStore(clients.dynamodb, clients.s3, table=table, bucket=bucket)
    saved = store.get("e2e_hello").head.fingerprint  # what the save stored
    key = "dev.kiln/fingerprint"
    listed = answer_body(
        function.invoke(event_for("http-api-tools-list.json", rpc("tools/list", {})))
    )
    assert {t["name"]: t["_meta"][key] for t in listed["result"]["tools"]}["e2e_hello"] == saved
    stale = "sha256:" + "0" * 64
    message = rpc("tools/call", {"name": "e2e_hello", "arguments": {"name": "x"},
                                 "_meta": {key: stale}})  # fmt: skip
    body = answer_body(function.invoke(event_for("http-api-tools-call.json", message)))
    assert body["error"]["code"] == -32602, body
    assert body["error"]["data"] == {"name": "e2e_hello", "fingerprint": saved, "sent": stale}
    message["params"]["_meta"] = {key: saved}
    body = answer_body(function.invoke(event_for("http-api-tools-call.json", message)))
    assert json.loads(call_text(body))["hello"] == "x"


def test_node_tools_run_on_the_node_binary_the_function_is_given(function: LambdaProcess) -> None:
    message = rpc("tools/call", {"name": "e2e_node_hello", "arguments": {"name": "node"}})
    body = answer_body(function.invoke(event_for("http-api-tools-call.json", message)))
    printed = json.loads(call_text(body))
    assert printed["hello"] == "node"
    if BUILD:  # the Node layer's binary, not whatever node is on PATH
        assert printed["node"].startswith("v24."), printed


def test_a_second_warm_invocation_still_works(function: LambdaProcess) -> None:
    pid = function.process.pid
    for round_ in range(2):
        message = rpc("tools/call", {"name": "e2e_hello", "arguments": {"name": f"warm{round_}"}})
        body = answer_body(function.invoke(event_for("http-api-tools-call.json", message)))
        assert json.loads(call_text(body))["hello"] == f"warm{round_}"
    assert function.alive()
    assert function.process.pid == pid


def test_function_url_events_are_served_by_the_same_handler(function: LambdaProcess) -> None:
    message = rpc("tools/call", {"name": "e2e_hello", "arguments": {"name": "url"}})
    body = answer_body(function.invoke(event_for("function-url-tools-call.json", message)))
    assert json.loads(call_text(body))["hello"] == "url"


def test_a_call_longer_than_the_time_left_answers_timeout_before_the_deadline(
    function: LambdaProcess,
) -> None:
    seen = len(function.records())
    message = rpc("tools/call", {"name": "e2e_sleeper", "arguments": {}})
    answer = function.invoke(event_for("http-api-tools-call.json", message), timeout_s=3.0)
    body = answer_body(answer)
    assert body["result"]["isError"] is True
    assert "[timeout]" in call_text(body)
    assert answer.answered_ms < answer.deadline_ms, "answered after the invocation's deadline"
    # Logged and counted as a timeout.
    new = function.records()[seen:]
    (line,) = [
        r
        for r in new
        if r.get("message") == "request" and r.get("function_request_id") == answer.request_id
    ]
    assert (line["tool"], line["outcome"]) == ("e2e_sleeper", "timeout")
    (emf,) = [r for r in new if r.get("tool") == "e2e_sleeper" and "_aws" in r]
    assert (value(emf, "ToolCalls"), value(emf, "ToolTimeouts"), value(emf, "ToolErrors")) == (
        1,
        1,
        1,
    )
    # And the function is still usable afterwards.
    again = rpc("tools/call", {"name": "e2e_hello", "arguments": {"name": "after"}})
    body = answer_body(function.invoke(event_for("http-api-tools-call.json", again)))
    assert json.loads(call_text(body))["hello"] == "after"


def test_each_invocation_logs_request_id_tool_outcome_and_duration(function: LambdaProcess) -> None:
    message = rpc("tools/call", {"name": "e2e_hello", "arguments": {}})
    answer = function.invoke(event_for("http-api-tools-call.json", message))
    lines = [r for r in function.records() if r.get("message") == "request"]
    (line,) = [r for r in lines if r.get("function_request_id") == answer.request_id]
    assert line["tool"] == "e2e_hello"
    assert line["outcome"] == "ok"
    assert line["method"] == "tools/call"
    assert line["duration_ms"] > 0


def test_metrics_count_calls_errors_duration_and_one_cold_start(function: LambdaProcess) -> None:
    seen = len(function.records())
    message = rpc("tools/call", {"name": "e2e_hello", "arguments": {}})
    answer_body(function.invoke(event_for("http-api-tools-call.json", message)))
    (emf,) = [r for r in function.records()[seen:] if r.get("tool") == "e2e_hello" and "_aws" in r]
    assert (value(emf, "ToolCalls"), value(emf, "ToolErrors"), value(emf, "ToolTimeouts")) == (
        1,
        0,
        0,
    )
    assert value(emf, "ToolDuration") > 0
    everything = [r for r in function.records() if "_aws" in r]
    assert len([r for r in everything if "ColdStart" in r]) == 1
    namespaces = {m["Namespace"] for r in everything for m in r["_aws"]["CloudWatchMetrics"]}
    assert namespaces == {"Kiln"}


def test_the_function_starts_the_snapstart_way_too(
    catalog: tuple[str, str], moto_endpoint: str, tmp_path: Path
) -> None:
    table, bucket = catalog
    env = {"AWS_LAMBDA_INITIALIZATION_TYPE": "snap-start"}
    for running in start_lambda(tmp_path, moto_endpoint, table, bucket, extra_env=env):
        assert running.api.restored.is_set(), "the runtime never asked for /restore/next"
        body = answer_body(
            running.invoke(event_for("http-api-tools-list.json", rpc("tools/list", {})))
        )
        assert {t["name"] for t in body["result"]["tools"]} == {
            "e2e_hello",
            "e2e_node_hello",
            "e2e_sleeper",
        }


def test_the_admin_function_serves_the_rest_api(
    catalog: tuple[str, str], moto_endpoint: str, tmp_path: Path
) -> None:
    table, bucket = catalog
    for running in start_lambda(tmp_path, moto_endpoint, table, bucket, handler="admin"):
        event = json.loads((EVENTS / "http-api-admin-health.json").read_text())
        answer = running.invoke(event)
        assert answer.kind == "response", answer.payload
        assert answer.payload["statusCode"] == 200
        assert json.loads(answer.payload["body"])["ok"] is True


def test_the_builder_reports_an_event_without_a_bundle_as_a_function_error(
    catalog: tuple[str, str], moto_endpoint: str, tmp_path: Path
) -> None:
    table, bucket = catalog
    for running in start_lambda(tmp_path, moto_endpoint, table, bucket, handler="builder"):
        answer = running.invoke({"bundle": "misspelt"})
        assert answer.kind == "error"
        assert answer.payload["errorType"] == "ValueError"
        assert "bundle_id" in answer.payload["errorMessage"]
        assert running.alive(), "a failed invocation must not end the runtime"
