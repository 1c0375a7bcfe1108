"""What the Lambda entry points read from requests and responses, and the time they allow."""

from __future__ import annotations

import base64
import json
import time
from typing import Any

from kiln.observability.telemetry import (
    HTTP_API_LIMIT_MS,
    FrontDoorContext,
    describe_request,
    describe_response,
    front_door_context,
)


class LambdaContext:
    """What the Lambda runtime hands a handler: only the parts these tests read."""

    aws_request_id = "req-1"

    def __init__(self, left_ms: int) -> None:
        self.deadline = time.time() * 1000 + left_ms

    def get_remaining_time_in_millis(self) -> int:
        return int(self.deadline - time.time() * 1000)


def http_event(
    body: Any, *, domain: str, started_ms: int | None = None, b64: bool = False
) -> dict[str, Any]:
    raw = json.dumps(body).encode()
    return {
        "version": "2.0",
        "body": base64.b64encode(raw).decode() if b64 else raw.decode(),
        "isBase64Encoded": b64,
        "requestContext": {
            "domainName": domain,
            "timeEpoch": started_ms if started_ms is not None else int(time.time() * 1000),
        },
    }


def response(body: Any, status: int = 200) -> dict[str, Any]:
    return {"statusCode": status, "body": json.dumps(body), "isBase64Encoded": False}


API = "abc123.execute-api.us-east-1.amazonaws.com"
URL = "abcdefghij.lambda-url.us-east-1.on.aws"
CALL = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "add_vat"}}


def test_tools_call_request_names_its_method_and_tool() -> None:
    info = describe_request(http_event(CALL, domain=API))
    assert (info.method, info.tool) == ("tools/call", "add_vat")


def test_base64_bodies_are_read_too() -> None:
    info = describe_request(http_event(CALL, domain=URL, b64=True))
    assert info.tool == "add_vat"


def test_other_methods_name_no_tool() -> None:
    info = describe_request(
        http_event({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, domain=API)
    )
    assert (info.method, info.tool) == ("tools/list", None)


def test_a_body_that_is_not_json_rpc_names_nothing() -> None:
    event = {"body": "{not json", "requestContext": {}}
    assert describe_request(event) == describe_request({"body": "[1, 2]"})
    assert describe_request(event).method is None


def test_outcomes_tell_ok_error_timeout_and_rejected_apart() -> None:
    ok = {"result": {"isError": False, "content": [{"type": "text", "text": "{}"}]}}
    failed = {
        "result": {"isError": True, "content": [{"type": "text", "text": "(no output)\n[exit 7]"}]}
    }
    timed_out = {
        "result": {
            "isError": True,
            "content": [{"type": "text", "text": "(no output)\n[timeout] killed after 2.0 s"}],
        }
    }
    error = {"jsonrpc": "2.0", "id": 1, "error": {"code": -32602, "message": "Unknown tool"}}
    assert describe_response(response(ok)) == "ok"
    assert describe_response(response(failed)) == "error"
    assert describe_response(response(timed_out)) == "timeout"
    assert describe_response(response(error)) == "rejected"
    assert describe_response({"statusCode": 401, "body": ""}) == "rejected"
    assert describe_response({"statusCode": 202, "body": ""}) == "ok"


def test_http_api_calls_get_no_more_time_than_the_api_allows() -> None:
    started = int(time.time() * 1000) - 10_000  # the API received it 10 s ago
    context = front_door_context(
        http_event(CALL, domain=API, started_ms=started), LambdaContext(120_000)
    )
    assert isinstance(context, FrontDoorContext)
    left = context.get_remaining_time_in_millis()
    assert HTTP_API_LIMIT_MS - 10_000 - 1_000 < left <= HTTP_API_LIMIT_MS - 10_000
    assert context.aws_request_id == "req-1"


def test_the_function_limit_wins_when_it_is_shorter() -> None:
    context = front_door_context(http_event(CALL, domain=API), LambdaContext(3_000))
    assert context.get_remaining_time_in_millis() <= 3_000


def test_function_url_calls_keep_the_whole_function_limit() -> None:
    lambda_context = LambdaContext(120_000)
    assert front_door_context(http_event(CALL, domain=URL), lambda_context) is lambda_context


def test_replayed_events_with_an_old_time_keep_the_function_limit() -> None:
    lambda_context = LambdaContext(120_000)
    old = http_event(CALL, domain=API, started_ms=1583348638390)  # a captured event
    assert front_door_context(old, lambda_context) is lambda_context


def test_a_gzipped_answer_is_read_for_its_outcome_too() -> None:
    import base64
    import gzip
    import json

    failed = {"result": {"isError": True, "content": [{"type": "text", "text": "[exit 7]"}]}}
    body = base64.b64encode(gzip.compress(json.dumps(failed).encode())).decode()
    answer = {"statusCode": 200, "body": body, "isBase64Encoded": True}
    assert describe_response(answer) == "error"
