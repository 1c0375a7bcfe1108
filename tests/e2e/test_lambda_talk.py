"""Tools that talk back through the public Lambda handler, driven as Lambda drives it.

2026-07-28 questions come back as `input_required` and the next invocation (a fresh request,
nothing kept in between but the sealed requestState) completes them; on the 2025 wire Lambda
cannot hold a request open, so a question is a tool error naming the revision that works;
progress arrives as SSE events in the buffered body, together with the result.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.test_lambda_runtime import LambdaProcess, event_for, rpc, start_lambda
from kiln.authoring import AuthoringService, FolderTarget
from kiln.aws.clients import ensure_resources, make_clients
from kiln.catalog.files import push, tool_folders
from kiln.catalog.store import CatalogStore

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "examples" / "conformance"
MODERN = "2026-07-28"
CAPS = {"elicitation": {}, "sampling": {}, "roots": {}}


@pytest.fixture(scope="module")
def function(
    moto_endpoint: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LambdaProcess]:
    table = bucket = f"kiln-e2e-talk-{uuid.uuid4().hex[:10]}"
    clients = make_clients(endpoint_url=moto_endpoint, region="us-east-1")
    ensure_resources(clients, table=table, bucket=bucket)
    store = CatalogStore(clients.dynamodb, clients.s3, table=table, bucket=bucket)
    push(FolderTarget(AuthoringService(store)), tool_folders(FIXTURES))
    yield from start_lambda(tmp_path_factory.mktemp("lambda-talk"), moto_endpoint, table, bucket)


def modern_event(name: str, **params: Any) -> dict[str, Any]:
    meta = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": CAPS,
        **params.pop("_meta", {}),
    }
    message = rpc(
        "tools/call",
        {"name": name, "arguments": params.pop("arguments", {}), **params, "_meta": meta},
    )
    event = event_for("http-api-tools-call.json", message)
    event["headers"].update(
        {"mcp-protocol-version": MODERN, "mcp-method": "tools/call", "mcp-name": name}
    )
    return event


def response_of(function: LambdaProcess, event: dict[str, Any]) -> dict[str, Any]:
    answer = function.invoke(event)
    assert answer.kind == "response", answer.payload
    return dict(answer.payload)


def body_of(function: LambdaProcess, event: dict[str, Any]) -> dict[str, Any]:
    response = response_of(function, event)
    assert response["statusCode"] == 200, response
    return dict(json.loads(response["body"]))


def test_a_question_is_input_required_and_the_next_invocation_completes_it(
    function: LambdaProcess,
) -> None:
    first = body_of(function, modern_event("test_input_required_result_multi_round"))["result"]
    assert first["resultType"] == "input_required"
    assert list(first["inputRequests"]) == ["step1"]
    answer = {"action": "accept", "content": {"name": "Ada"}}
    second = body_of(
        function,
        modern_event(
            "test_input_required_result_multi_round",
            inputResponses={"step1": answer},
            requestState=first["requestState"],
        ),
    )["result"]
    assert list(second["inputRequests"]) == ["step2"]
    third = body_of(
        function,
        modern_event(
            "test_input_required_result_multi_round",
            inputResponses={"step2": {"action": "accept", "content": {"color": "red"}}},
            requestState=second["requestState"],
        ),
    )["result"]
    assert third["resultType"] == "complete"
    assert third["content"][0]["text"] == "Ada likes red"


@pytest.mark.parametrize(
    ("name", "answer"),
    [
        (
            "test_input_required_result_sampling",
            {"role": "assistant", "content": {"type": "text", "text": "Paris"}, "model": "m"},
        ),
        ("test_input_required_result_list_roots", {"roots": [{"uri": "file:///a", "name": "a"}]}),
    ],
)
def test_sampling_and_roots_round_trips_through_lambda(
    function: LambdaProcess, name: str, answer: dict[str, Any]
) -> None:
    first = body_of(function, modern_event(name))["result"]
    (key,) = first["inputRequests"]
    done = body_of(
        function,
        modern_event(name, inputResponses={key: answer}, requestState=first["requestState"]),
    )["result"]
    assert done["resultType"] == "complete"
    assert done.get("isError") is False, done


def test_a_tampered_state_is_refused_by_the_lambda_handler(function: LambdaProcess) -> None:
    first = body_of(function, modern_event("test_input_required_result_tampered_state"))["result"]
    refused = body_of(
        function,
        modern_event(
            "test_input_required_result_tampered_state",
            inputResponses={"confirm": {"action": "accept"}},
            requestState=first["requestState"] + "-TAMPERED",
        ),
    )
    assert refused["error"]["code"] == -32602


def test_on_2025_a_question_is_a_tool_error_naming_2026_07_28(function: LambdaProcess) -> None:
    message = rpc("tools/call", {"name": "test_elicitation", "arguments": {"message": "hi"}})
    body = body_of(function, event_for("http-api-tools-call.json", message))
    result = body["result"]
    assert result["isError"] is True
    text = result["content"][0]["text"]
    assert "cannot hold an MCP 2025 request open" in text
    assert "Call it over MCP 2026-07-28" in text


def test_progress_arrives_as_events_buffered_with_the_result(function: LambdaProcess) -> None:
    message = rpc(
        "tools/call",
        {"name": "test_tool_with_progress", "arguments": {}, "_meta": {"progressToken": 5}},
    )
    response = response_of(function, event_for("http-api-tools-call.json", message))
    assert response["statusCode"] == 200
    assert response["headers"]["content-type"] == "text/event-stream"
    events = [
        json.loads(line.removeprefix("data: "))
        for line in response["body"].splitlines()
        if line.startswith("data: ")
    ]
    assert [e["params"]["progress"] for e in events[:-1]] == [0, 50, 100]
    assert events[-1]["result"]["content"][0]["text"] == "Progress test completed"
