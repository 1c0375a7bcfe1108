"""The window of the last N hours and the per-tool usage summed from days' hourly totals."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from kiln.accounting.ledger_totals import counts_of
from kiln.accounting.usage import by_tool_of_hours, hour_window


def test_the_last_24_hours_are_the_current_hour_so_far_and_the_23_before_it() -> None:
    start, days = hour_window(24, datetime(2026, 1, 2, 10, 42, 7, tzinfo=UTC))
    assert start == datetime(2026, 1, 1, 11, tzinfo=UTC)
    assert days == ["2026-01-01", "2026-01-02"]
    start, days = hour_window(24, datetime(2026, 1, 2, 23, 59, tzinfo=UTC))
    assert (start, days) == (datetime(2026, 1, 2, 0, tzinfo=UTC), ["2026-01-02"])
    start, days = hour_window(49, datetime(2026, 3, 1, 0, 5, tzinfo=UTC))
    assert days == ["2026-02-27", "2026-02-28", "2026-03-01"]


def test_an_entry_counts_in_its_tools_hour() -> None:
    item = {"at": {"S": "2026-01-02T07:59:59.999Z"}, "caller": {"S": "key:1"},
            "tool": {"S": "echo"}, "outcome": {"S": "timeout"},
            "duration_ms": {"N": "12.5"}}  # fmt: skip
    hourly = {attribute: amount for attribute, amount in counts_of(item)
              if attribute.startswith("hour|")}  # fmt: skip
    assert hourly == {"hour|07|echo|calls": 1.0, "hour|07|echo|timeout": 1.0,
                      "hour|07|echo|run_ms": 12.5}  # fmt: skip


def _zero(**counts: int) -> dict[str, Any]:
    zero = {
        "calls": 0,
        "ok": 0,
        "tool_error": 0,
        "timeout": 0,
        "refused": 0,
        "cancelled": 0,
        "not_ready": 0,
    }
    return {**zero, **counts}


def test_usage_over_hours_sums_only_the_hours_from_the_start() -> None:
    yesterday = {"day": "2026-01-01", "by_hour_tool": {
        "10": {"a": _zero(calls=5, ok=5)},  # before the window: not counted
        "11": {"a": _zero(calls=2, ok=1, tool_error=1)},
        "23": {"b": _zero(calls=1, refused=1)},
    }}  # fmt: skip
    today = {"day": "2026-01-02", "by_hour_tool": {"10": {"a": _zero(calls=2, timeout=1, ok=1)}}}
    start = datetime(2026, 1, 1, 11, tzinfo=UTC)
    assert by_tool_of_hours([yesterday, today], start) == {
        "a": {"calls": 4, "errors": 2, "not_ready": 0, "error_rate": 0.5},
        "b": {"calls": 1, "errors": 0, "not_ready": 0, "error_rate": 0.0},
    }
    assert by_tool_of_hours([{"day": "2026-01-01"}], start) == {}  # totals without hours
