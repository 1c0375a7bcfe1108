"""The studio's usage reads on a real `kiln dev`: calls per tool (over the last hours or days,
from the ledger's hourly and day totals), a tool's chart, the ledger filtered by view, and a
key's and a view's quota use."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import datetime, timedelta

import boto3
import pytest

from kiln.accounting.ledger import CallLedger, CallRecord
from support.devserver import DevServer, kiln_dev

ECHO = "import json, sys\nprint(json.load(sys.stdin)['text'])\n"
FAILS = "import sys\nsys.exit(3)\n"
SCHEMA = {"type": "object", "properties": {"text": {"type": "string"}}}


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    root = tmp_path_factory.mktemp("usage")
    for name, code in (("echo", ECHO), ("fails", FAILS)):
        (root / "tools" / name).mkdir(parents=True)
        manifest = {"description": "d", "input_schema": SCHEMA, "tags": ["t"]}
        (root / "tools" / name / "tool.json").write_text(json.dumps(manifest))
        (root / "tools" / name / "main.py").write_text(code)
    view = {"tools": ["tag:t"], "published": True, "quota": {"calls_per_minute": 100}}
    (root / "tools" / "both.view.json").write_text(json.dumps(view))
    with kiln_dev(root / "state", "--no-examples", "--tools", str(root / "tools")) as server:
        yield server


def test_calls_errors_and_quota_use_read_back_as_made(dev: DevServer) -> None:
    key = dev.create_key("metered", "--calls-per-minute", "60")
    for n in range(3):
        reply = dev.mcp("tools/call", {"name": "echo", "arguments": {"text": "x"}}, key=key, rid=n)
        assert reply.status_code == 200, reply.text
    for n in range(2):
        reply = dev.mcp("tools/call", {"name": "fails", "arguments": {"text": "x"}},
                        path="/mcp/v/both", key=key, rid=n)  # fmt: skip
        assert reply.status_code == 200, reply.text

    by_tool = dev.api("GET", "/api/calls/by-tool").json()["tools"]
    assert by_tool["echo"] == {"calls": 3, "errors": 0, "not_ready": 0, "error_rate": 0.0}
    assert by_tool["fails"] == {"calls": 2, "errors": 2, "not_ready": 0, "error_rate": 1.0}
    from_totals = dev.api("GET", "/api/calls/by-tool?days=2").json()
    mine = {name: from_totals["tools"].get(name) for name in ("echo", "fails")}
    assert mine == {name: by_tool[name] for name in ("echo", "fails")}, from_totals
    assert from_totals["since"].endswith("T00:00:00Z"), from_totals

    chart = dev.api("GET", "/api/calls/chart?tool=fails&range=hour").json()
    assert len(chart["buckets"]) == 12
    assert chart["bucket_s"] == 300
    assert chart["totals"]["calls"] == 2
    assert chart["totals"]["errors"] == 2
    assert chart["outcomes"]["tool_error"] == 2
    assert sum(b["calls"] for b in chart["buckets"]) == 2

    through_view = dev.api("GET", "/api/calls?view=both").json()["calls"]
    assert sorted(c["tool"] for c in through_view) == ["fails", "fails"]

    keys = {k["name"]: k for k in dev.api("GET", "/api/keys").json()["keys"]}
    assert keys["metered"]["usage"]["calls_this_minute"] == 5
    view = dev.api("GET", "/api/views/both").json()
    assert view["usage"]["calls_this_minute"] == 2


def test_the_last_24_hours_count_whole_hours_and_not_a_call_of_25_hours_ago(
    dev: DevServer,
) -> None:
    """Entries dated 22 h and 25 h ago, written with the ledger's own API into kiln dev's
    table (another process's totals, flushed), and two calls made now over MCP: the tool list's
    `by-tool` (24 h) counts the calls of now and 22 h ago, not the one of 25 h ago."""
    env = dev.env
    db = boto3.client("dynamodb", endpoint_url=env["AWS_ENDPOINT_URL"],
                      region_name=env["AWS_REGION"], aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                      aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"])  # fmt: skip
    elsewhere = CallLedger(db, table=env["KILN_TABLE"], digest_key=b"k" * 32, shards=1)
    now = time.time()
    for hours_ago, outcome in ((22, "ok"), (22, "timeout"), (25, "tool_error")):
        entry = CallRecord(at="", caller="key:elsewhere", tool="hourly", outcome=outcome)  # type: ignore[arg-type]
        elsewhere.record(entry, started=now - hours_ago * 3600)
    elsewhere.day_totals.flush()
    for n in range(2):
        reply = dev.mcp("tools/call", {"name": "fails", "arguments": {"text": "x"}}, rid=n)
        assert reply.status_code == 200, reply.text

    body = dev.api("GET", "/api/calls/by-tool?hours=24").json()
    assert body["tools"]["hourly"] == {
        "calls": 2,
        "errors": 1,
        "not_ready": 0,
        "error_rate": 0.5,
    }, body
    assert body["tools"]["fails"]["calls"] >= 2, body
    since = datetime.fromisoformat(body["since"].replace("Z", "+00:00"))
    until = datetime.fromisoformat(body["until"].replace("Z", "+00:00"))
    assert since.minute == since.second == 0, body  # whole hours: this one so far and 23 more
    assert since == until.replace(minute=0, second=0) - timedelta(hours=23), body
    assert dev.api("GET", "/api/calls/by-tool").json()["tools"]["hourly"]["calls"] == 2
    longer = dev.api("GET", "/api/calls/by-tool?hours=27").json()["tools"]["hourly"]
    assert longer == {"calls": 3, "errors": 2, "not_ready": 0, "error_rate": 0.6667}, longer


@pytest.mark.parametrize(
    ("query", "says"),
    [
        ("/api/calls/chart?tool=echo&range=week", "range: must be one of hour, day, month"),
        ("/api/calls/by-tool?hours=0", "hours: must be from 1 to 720"),
        ("/api/calls/by-tool?days=31", "days: must be from 1 to 30"),
        ("/api/calls/by-tool?days=1&hours=2", "hours, days: give one of them, not both"),
    ],
)
def test_a_bad_usage_query_is_named(dev: DevServer, query: str, says: str) -> None:
    reply = dev.api("GET", query)
    assert reply.status_code == 400, reply.text
    assert reply.json()["error"]["message"] == says


def test_percentiles_are_nearest_rank() -> None:
    from kiln.accounting.usage import percentile

    assert percentile([], 0.5) is None
    assert percentile([400.0, 100.0, 300.0, 200.0], 0.5) == 200.0
    assert percentile([float(n) for n in range(1, 101)], 0.99) == 99.0
    assert percentile([5.0], 0.99) == 5.0


def test_charts_start_on_a_bucket_boundary() -> None:
    from datetime import UTC, datetime

    from kiln.accounting.usage import window

    start, step, count = window("day", datetime(2026, 1, 2, 10, 42, tzinfo=UTC))
    assert (start, step.total_seconds(), count) == (datetime(2026, 1, 1, 11, tzinfo=UTC), 3600, 24)


def test_usage_over_days_sums_each_days_totals() -> None:
    from kiln.accounting.usage import by_tool_of_days

    zero = dict.fromkeys(("calls", "ok", "tool_error", "timeout", "refused", "cancelled"), 0)
    zero["not_ready"] = 0
    yesterday = {"by_tool": {"a": {**zero, "calls": 3, "ok": 2, "timeout": 1}}}
    today = {"by_tool": {"a": {**zero, "calls": 1, "tool_error": 1},
                         "b": {**zero, "calls": 2, "refused": 1, "cancelled": 1}}}  # fmt: skip
    assert by_tool_of_days([yesterday, today]) == {
        "a": {"calls": 4, "errors": 2, "not_ready": 0, "error_rate": 0.5},
        "b": {"calls": 2, "errors": 0, "not_ready": 0, "error_rate": 0.0},  # not errors
    }


def test_calls_made_while_the_packages_built_are_left_out_of_the_error_rate() -> None:
    from kiln.accounting.usage import by_tool_of_days

    zero = dict.fromkeys(("ok", "tool_error", "timeout", "refused", "cancelled"), 0)
    polled = {**zero, "calls": 8, "not_ready": 6, "ok": 1, "tool_error": 1}
    assert by_tool_of_days([{"by_tool": {"p": polled}}]) == {
        "p": {"calls": 8, "errors": 1, "not_ready": 6, "error_rate": 0.5},  # 1 of the 2 that ran
    }
