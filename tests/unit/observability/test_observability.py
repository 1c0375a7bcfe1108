"""What the Lambda entry points log of a request (what the protocol found), and the time they
allow."""

from __future__ import annotations

import ast
import base64
import inspect
import json
import time
from typing import Any

import pytest

from kiln.observability import telemetry
from kiln.observability.metrics import MetricBatch
from kiln.observability.telemetry import (
    HTTP_API_LIMIT_MS,
    FrontDoorContext,
    RequestInfo,
    describe,
    front_door_context,
)
from kiln.protocol.backend import Outcome, Seen


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


def test_the_log_line_says_what_the_protocol_found_the_request_to_be() -> None:
    seen = Seen(method="tools/call", tool="add_vat", outcome="timeout")
    info, outcome = describe(seen, {"statusCode": 200, "body": "not read"})
    assert (info.method, info.tool, outcome) == ("tools/call", "add_vat", "timeout")


def test_outcomes_tell_ok_error_timeout_and_rejected_apart() -> None:
    outcomes: tuple[Outcome, ...] = ("ok", "error", "timeout", "rejected")
    for outcome in outcomes:
        assert describe(Seen("tools/call", "t", outcome), response({}))[1] == outcome


def test_a_request_the_protocol_did_not_answer_is_told_by_its_status() -> None:
    assert describe(Seen("tools/list"), {"statusCode": 200, "body": "{}"})[1] == "ok"
    assert describe(Seen(), {"statusCode": 202, "body": ""})[1] == "ok"
    assert describe(None, {"statusCode": 401, "body": ""}) == (RequestInfo(None, None), "rejected")
    assert describe(None, {"statusCode": 200, "body": "{}"})[1] == "ok"


def test_the_telemetry_parses_no_body() -> None:
    # The protocol parses the request once and tells the edge what it found (Invocation.hear);
    # a body parser here would be the second and third parse of every Lambda request.
    source = inspect.getsource(telemetry)
    tree = ast.parse(source)
    calls = {ast.unparse(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)}
    parsers = {call for call in calls if call.endswith(("loads", "decompress", "b64decode"))}
    assert not parsers, f"kiln.observability.telemetry parses bodies again: {sorted(parsers)}"


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


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def batch_at(now: float, flush_s: float = 10.0) -> tuple[MetricBatch, Clock]:
    clock = Clock(now)
    return MetricBatch("Kiln", "kiln", flush_s, clock=clock), clock


def by_tool(documents: list[dict[str, Any]]) -> dict[str | None, dict[str, Any]]:
    return {doc.get("tool"): doc for doc in documents}


def test_metrics_are_written_at_once_after_a_quiet_spell_then_at_most_every_flush_s() -> None:
    batch, clock = batch_at(6000.0)  # the start of a minute
    first = by_tool(batch.add("add_vat", "ok", 12.0))
    assert first["add_vat"]["ToolCalls"] == 1
    assert first[None]["Requests"] == 1
    held = []
    for outcome in ("ok", "error", "timeout"):
        clock.now += 2
        held += batch.add("add_vat", outcome, 30.0)
    clock.now += 2
    held += batch.add(None, "rejected", 1.0)
    assert held == []  # within 10 s of the last write: held
    clock.now += 3  # 11 s after the last write
    due = by_tool(batch.add("add_vat", "ok", 5.0))
    tool = due["add_vat"]
    assert (tool["ToolCalls"], tool["ToolErrors"], tool["ToolTimeouts"]) == (4, 2, 1)
    assert tool["ToolDuration"] == [30.0, 30.0, 30.0, 5.0]  # every call a sample
    assert due[None]["Requests"] == 5
    assert tool["_aws"]["Timestamp"] == 6002_000  # the batch's first request
    units = {m["Name"]: m["Unit"] for m in tool["_aws"]["CloudWatchMetrics"][0]["Metrics"]}
    assert units["ToolDuration"] == "Milliseconds"
    assert units["ToolCalls"] == "Count"
    assert tool["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [["service", "tool"]]


def test_a_batch_never_spans_two_minutes() -> None:
    batch, clock = batch_at(6000.0)
    batch.add("t", "ok", 1.0)  # written at once
    clock.now = 6052.0
    assert batch.add("t", "ok", 1.0) != []  # 52 s later: written at once
    clock.now = 6055.0
    assert batch.add("t", "ok", 1.0) == []  # held
    clock.now = 6061.0  # the next minute, 9 s after the last write
    due = batch.add("t", "ok", 1.0)
    assert [doc["_aws"]["Timestamp"] for doc in due] == [6055_000, 6055_000]
    assert by_tool(due)["t"]["ToolCalls"] == 1  # the new minute's call is held
    clock.now = 6071.0
    assert by_tool(batch.add("t", "ok", 1.0))["t"]["ToolCalls"] == 2


def test_a_tool_with_100_durations_is_written_at_once() -> None:
    batch, clock = batch_at(6000.0, flush_s=60.0)
    batch.add("t", "ok", 1.0)
    written = []
    for _ in range(100):
        clock.now += 0.01
        written += batch.add("t", "ok", 2.0)
    (tool,) = [doc for doc in written if doc.get("tool") == "t"]
    assert len(tool["ToolDuration"]) == 100


def test_with_flush_s_0_every_request_writes_its_metrics() -> None:
    batch, _ = batch_at(6000.0, flush_s=0.0)
    for _ in range(3):
        assert by_tool(batch.add("t", "ok", 1.0))["t"]["ToolDuration"] == 1.0


class RunnerContext:
    aws_request_id = "req-1"
    function_name = "kiln-runner"
    memory_limit_in_mb = 2048
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:kiln-runner"
    tenant_id = "t"


@pytest.mark.filterwarnings("ignore:No application metrics to publish")
def test_the_runners_cold_start_line_is_the_document_powertools_writes(capsys: Any) -> None:
    """kiln.observability.plain writes, without Powertools, the ColdStart EMF document that
    Powertools' capture_cold_start_metric writes (dashboards and alarms read the same metric),
    and only on the first invocation."""
    from aws_lambda_powertools.metrics import Metrics
    from aws_lambda_powertools.metrics.provider import cold_start

    from kiln.observability import plain

    cold_start.reset_cold_start_flag()  # as in a fresh process
    theirs = Metrics(namespace="Kiln", service="kiln")
    theirs.log_metrics(lambda e, c: None, capture_cold_start_metric=True)({}, RunnerContext())
    handler = plain.instrument(lambda e, c: "ran", namespace="Kiln", service="kiln")
    assert handler({}, RunnerContext()) == "ran"
    assert handler({}, RunnerContext()) == "ran"
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line]
    cold = [line for line in lines if "ColdStart" in line]
    assert len(cold) == 2, lines  # Powertools' and ours: the second invocation writes none
    for document in cold:
        document["_aws"].pop("Timestamp")
    assert cold[0] == cold[1]
