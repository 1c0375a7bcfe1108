"""One MCP behaviour suite, run over every transport Kiln has.

The same JSON-RPC exchanges go to the in-process endpoint (`Kiln.endpoint.handle`), to HTTP
on a real `kiln dev`, to a real `kiln stdio` process and to the Lambda handler
(`kiln.lambda_handlers.mcp`, imported in a fresh process as the runtime does), and must get
the same answers. Each transport speaks the 2025-11-25 era after an `initialize`; the
catalog holds the conformance fixtures and add_vat.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from conftest import AwsStack
from kiln.authoring import AuthoringService, FolderTarget
from kiln.aws.clients import ensure_resources, make_clients
from kiln.catalog.files import push, tool_folders
from kiln.catalog.store import CatalogStore
from kiln.protocol import HttpRequest
from kiln.protocol.backend import CallContext
from kiln.settings import Settings
from kiln.stack import build_kiln
from support.devserver import serving

ROOT = Path(__file__).resolve().parents[3]
FOLDERS = [ROOT / "examples" / "conformance", ROOT / "examples" / "tools" / "add_vat"]
VERSION = "2025-11-25"
Message = dict[str, Any]
Exchange = Callable[[list[Message]], dict[Any, Message]]  # requests -> answers by id

INITIALIZE: Message = {
    "jsonrpc": "2.0",
    "id": "init",
    "method": "initialize",
    "params": {"protocolVersion": VERSION, "capabilities": {}, "clientInfo": {"name": "suite"}},
}
INITIALIZED: Message = {"jsonrpc": "2.0", "method": "notifications/initialized"}


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "KILN_"))}
    return {**env, "PYTHONPATH": str(ROOT / "functions"), **extra}


def by_id(answers: list[Message]) -> dict[Any, Message]:
    return {answer["id"]: answer for answer in answers if "id" in answer}


def seeded_stack(moto_endpoint: str) -> AwsStack:
    suffix = uuid.uuid4().hex[:10]
    clients = make_clients(endpoint_url=moto_endpoint, region="us-east-1")
    stack = AwsStack(moto_endpoint, clients, f"kiln-suite-{suffix}", f"kiln-suite-{suffix}")
    ensure_resources(clients, table=stack.table, bucket=stack.bucket)
    store = CatalogStore(clients.dynamodb, clients.s3, table=stack.table, bucket=stack.bucket)
    folders = [folder for root in FOLDERS for folder in tool_folders(root)]
    push(FolderTarget(AuthoringService(store)), folders)
    return stack


# -- the transports -------------------------------------------------------------------------


def endpoint_transport(stack: AwsStack, tmp: Path) -> Iterator[Exchange]:
    settings = Settings(
        table=stack.table, bucket=stack.bucket, endpoint_url=stack.endpoint_url,
        region="us-east-1", bundle_cache_dir=tmp, local_time_budget_s=30.0,
    )  # fmt: skip
    endpoint = build_kiln(settings, clients=stack.clients).endpoint
    headers = {
        "content-type": "application/json",
        "accept": "application/json, text/event-stream",
        "mcp-protocol-version": VERSION,
    }

    async def send(messages: list[Message]) -> list[Message]:
        answers = []
        for message in messages:
            request = HttpRequest("POST", headers, json.dumps(message).encode())
            reply = await endpoint.handle(request, CallContext(time_left_s=30.0))
            if reply.body:
                answers.append(json.loads(reply.body))
        return answers

    yield lambda messages: by_id(asyncio.run(send(messages)))


def kiln_dev_transport(stack: AwsStack, tmp: Path) -> Iterator[Exchange]:
    tools = [arg for folder in FOLDERS for arg in ("--tools", str(folder))]
    command = [sys.executable, "-m", "kiln.cli", "dev", "--no-examples", *tools,
               "--state-dir", str(tmp / "state"), "--port", "0"]  # fmt: skip
    with (
        serving(command, tmp / "dev.log", env=clean_env()) as served,
        httpx.Client(timeout=60) as http,
    ):
        url = served.url
        headers = {"Accept": "application/json, text/event-stream"}
        headers["MCP-Protocol-Version"] = VERSION

        def exchange(messages: list[Message]) -> dict[Any, Message]:
            replies = [http.post(url + "/mcp", json=m, headers=headers) for m in messages]
            return by_id([r.json() for r in replies if r.content])

        yield exchange


def stdio_transport(stack: AwsStack, tmp: Path) -> Iterator[Exchange]:
    tools = [arg for folder in FOLDERS for arg in ("--tools", str(folder))]

    def exchange(messages: list[Message]) -> dict[Any, Message]:
        lines = [INITIALIZE, INITIALIZED, *messages]
        done = subprocess.run(
            [sys.executable, "-m", "kiln.cli", "stdio", "--no-examples", *tools,
             "--state-dir", str(tmp / "stdio-state")],
            input="".join(json.dumps(line) + "\n" for line in lines).encode(),
            capture_output=True, env=clean_env(), timeout=120, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr.decode()
        return by_id([json.loads(line) for line in done.stdout.splitlines()])

    yield exchange


LAMBDA = """
import base64, json, sys
import kiln.lambda_handlers as handlers

class Context:
    aws_request_id = "suite"
    function_name = "kiln-mcp"
    memory_limit_in_mb = 1024
    invoked_function_arn = "arn:aws:lambda:us-east-1:000000000000:function:kiln-mcp"
    def get_remaining_time_in_millis(self):
        return 30000

for line in sys.stdin:
    event = {
        "version": "2.0", "routeKey": "$default", "rawPath": "/mcp", "rawQueryString": "",
        "headers": {"content-type": "application/json", "host": "kiln.example",
                    "accept": "application/json, text/event-stream",
                    "mcp-protocol-version": sys.argv[1]},
        "requestContext": {"http": {"method": "POST", "path": "/mcp", "sourceIp": "127.0.0.1",
                                    "protocol": "HTTP/1.1"},
                           "domainName": "abc.lambda-url.us-east-1.on.aws", "stage": "$default"},
        "body": line, "isBase64Encoded": False,
    }
    answer = handlers.mcp(event, Context())
    body = answer.get("body") or ""
    if answer.get("isBase64Encoded"):
        body = base64.b64decode(body).decode()
    print(json.dumps({"status": answer["statusCode"], "body": body}), flush=True)
"""


def lambda_transport(stack: AwsStack, tmp: Path, **extra: str) -> Iterator[Exchange]:
    """`extra`: more of the function's environment (KILN_CATALOG_MODE, test_search_mode.py)."""
    env = clean_env(
        AWS_ENDPOINT_URL=stack.endpoint_url, AWS_REGION="us-east-1",
        AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing",
        AWS_LAMBDA_FUNCTION_NAME="kiln-mcp", KILN_TABLE=stack.table, KILN_BUCKET=stack.bucket,
        KILN_BUNDLE_CACHE_DIR=str(tmp / "bundles"), KILN_RUN_UIDS="off",
        POWERTOOLS_METRICS_NAMESPACE="KilnSuite", **extra,
    )  # fmt: skip

    def exchange(messages: list[Message]) -> dict[Any, Message]:
        done = subprocess.run(
            [sys.executable, "-c", LAMBDA, VERSION],
            input="".join(json.dumps(m) + "\n" for m in messages).encode(),
            capture_output=True, env=env, timeout=120, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr.decode()
        replies = [json.loads(line) for line in done.stdout.splitlines() if line.startswith(b"{")]
        return by_id([json.loads(r["body"]) for r in replies if r.get("body")])

    yield exchange


TRANSPORTS = {
    "endpoint": endpoint_transport,
    "kiln-dev-http": kiln_dev_transport,
    "kiln-stdio": stdio_transport,
    "lambda": lambda_transport,
}


@pytest.fixture(scope="module", params=sorted(TRANSPORTS))
def mcp(
    request: pytest.FixtureRequest, moto_endpoint: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Exchange]:
    stack = seeded_stack(moto_endpoint)
    yield from TRANSPORTS[request.param](stack, tmp_path_factory.mktemp(request.param))


def request(rid: Any, method: str, params: Message | None = None) -> Message:
    message: Message = {"jsonrpc": "2.0", "id": rid, "method": method}
    if params is not None:
        message["params"] = params
    return message


def call(rid: Any, name: str, arguments: Any = None) -> Message:
    params: Message = {"name": name}
    if arguments is not None:
        params["arguments"] = arguments
    return request(rid, "tools/call", params)


# -- the behaviours -------------------------------------------------------------------------


def test_ping_answers_an_empty_result(mcp: Exchange) -> None:
    assert mcp([request(1, "ping")])[1] == {"jsonrpc": "2.0", "id": 1, "result": {}}


def test_the_catalog_lists_with_unique_names_and_object_schemas(mcp: Exchange) -> None:
    tools = mcp([request(1, "tools/list")])[1]["result"]["tools"]
    names = [tool["name"] for tool in tools]
    assert len(names) == len(set(names))
    assert {"add_vat", "test_simple_text", "greet"} <= set(names)
    assert all(tool["inputSchema"]["type"] == "object" for tool in tools)


def test_a_tool_runs_and_returns_the_contract_text(mcp: Exchange) -> None:
    result = mcp([call(1, "add_vat", {"net": 99.99})])[1]["result"]
    assert result["isError"] is False
    assert json.loads(result["content"][0]["text"])["gross"] == "119.99"


def test_arguments_breaking_the_schema_are_named_but_never_echoed(mcp: Exchange) -> None:
    answers = mcp([call(1, "add_vat", {"net": -987.65, "rate": 101}), call(2, "add_vat", {})])
    text = answers[1]["result"]["content"][0]["text"]
    assert answers[1]["result"]["isError"] is True
    assert "net: must be ≥ 0" in text
    assert "rate: must be ≤ 100" in text
    assert "987.65" not in text
    assert "missing required property 'net'" in answers[2]["result"]["content"][0]["text"]


def test_an_unknown_tool_and_an_unknown_method_get_their_json_rpc_codes(mcp: Exchange) -> None:
    answers = mcp([call(1, "no_such_tool", {}), request(2, "no/such/method")])
    assert answers[1]["error"]["code"] == -32602
    assert answers[2]["error"]["code"] == -32601


def test_a_bad_cursor_gets_invalid_params(mcp: Exchange) -> None:
    assert mcp([request(1, "tools/list", {"cursor": "not-ours"})])[1]["error"]["code"] == -32602


def test_a_tool_error_is_a_result_with_is_error(mcp: Exchange) -> None:
    result = mcp([call(1, "test_error_handling", {})])[1]["result"]
    assert result["isError"] is True
    assert result["content"][0]["type"] == "text"


def test_content_blocks_come_back_as_the_fixture_printed_them(mcp: Exchange) -> None:
    answers = mcp([call(1, "test_image_content", {}), call(2, "test_multiple_content_types", {})])
    assert answers[1]["result"]["content"][0]["type"] == "image"
    kinds = [block["type"] for block in answers[2]["result"]["content"]]
    assert kinds == ["text", "image", "resource"]


FINGERPRINT = "dev.kiln/fingerprint"
LISTED_FINGERPRINTS: dict[str, str] = {}  # the first transport's, for the others to match


def test_a_call_pinned_to_a_fingerprint_runs_only_while_the_tool_has_it(mcp: Exchange) -> None:
    tools = {t["name"]: t for t in mcp([request(1, "tools/list")])[1]["result"]["tools"]}
    mine, other = tools["add_vat"]["_meta"][FINGERPRINT], tools["greet"]["_meta"][FINGERPRINT]
    # The same catalog pushed into another table, served by another process: the same prints.
    assert LISTED_FINGERPRINTS.setdefault("add_vat", mine) == mine
    assert LISTED_FINGERPRINTS.setdefault("greet", other) == other

    def pinned(rid: int, fingerprint: object) -> Message:
        message = call(rid, "add_vat", {"net": 10})
        message["params"]["_meta"] = {FINGERPRINT: fingerprint}
        return message

    answers = mcp([pinned(1, mine), pinned(2, other), pinned(3, "sha256:nope")])
    assert answers[1]["result"]["isError"] is False
    assert json.loads(answers[1]["result"]["content"][0]["text"])["gross"] == "12.00"
    refused = answers[2]["error"]
    assert refused["code"] == -32602, answers[2]
    assert refused["message"].startswith("Tool 'add_vat' was not run: it is no longer"), refused
    assert mine in refused["message"], refused
    assert refused["data"] == {"name": "add_vat", "fingerprint": mine, "sent": other}
    assert answers[3]["error"]["code"] == -32602, answers[3]
    assert "must be a tool's fingerprint" in answers[3]["error"]["message"], answers[3]
