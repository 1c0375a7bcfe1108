"""What the call ledger says about use: per tool over a window, and a tool's chart series.

An *error* is a call that reached a tool and did not answer: `tool_error` or `timeout`
(`refused` is a quota saying no before the tool ran; `cancelled` is the caller's choice;
`not_ready` is a call made while the tool's packages were still being built: all three are
counted among the outcomes, not as errors). A tool's error rate is its errors over its calls
that could start: calls made while its packages were being built are in neither. Durations
are of the calls that ran (a recorded duration above zero); percentiles are nearest-rank.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from kiln.accounting.ledger import OUTCOMES, CallRecord, LedgerQueryError

ERRORS = ("tool_error", "timeout")
# range -> (bucket length, number of buckets): the last hour, day, 30 days.
RANGES: dict[str, tuple[timedelta, int]] = {
    "hour": (timedelta(minutes=5), 12),
    "day": (timedelta(hours=1), 24),
    "month": (timedelta(days=1), 30),
}


def percentile(values: Sequence[float], share: float) -> float | None:
    """The nearest-rank percentile (`share` of 1) of `values`; None when there are none."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(share * len(ordered)))
    return ordered[rank - 1]


def by_tool(records: Iterable[CallRecord]) -> dict[str, dict[str, Any]]:
    """Calls, errors, calls made before its packages were built, and error rate of each tool."""
    tools: dict[str, dict[str, Any]] = {}
    for record in records:
        row = tools.setdefault(record.tool, {"calls": 0, "errors": 0, "not_ready": 0})
        row["calls"] += 1
        row["errors"] += record.outcome in ERRORS
        row["not_ready"] += record.outcome == "not_ready"
    return _rated(tools)


def _rated(tools: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    for row in tools.values():
        started = row["calls"] - row["not_ready"]
        row["error_rate"] = round(row["errors"] / started, 4) if started > 0 else 0.0
    return tools


def by_tool_of_days(totals: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Calls, errors and error rate of each tool, summed over days' totals (`CallLedger.totals`)."""
    tools: dict[str, dict[str, Any]] = {}
    for day in totals:
        for tool, counts in day["by_tool"].items():
            row = tools.setdefault(tool, {"calls": 0, "errors": 0, "not_ready": 0})
            row["calls"] += counts["calls"]
            row["errors"] += sum(counts[outcome] for outcome in ERRORS)
            row["not_ready"] += counts.get("not_ready", 0)
    return _rated(tools)


def hour_window(hours: int, now: datetime) -> tuple[datetime, list[str]]:
    """The start of the last `hours` whole UTC hours counting the current one so far (its
    start and the 0 to `hours - 1` hours before it), and the UTC days (`yyyy-mm-dd`) they span."""
    current = now.replace(minute=0, second=0, microsecond=0)
    start = current - timedelta(hours=hours - 1)
    days = []
    day = start.date()
    while day <= current.date():
        days.append(day.isoformat())
        day += timedelta(days=1)
    return start, days


def by_tool_of_hours(
    totals: Iterable[Mapping[str, Any]], start: datetime
) -> dict[str, dict[str, Any]]:
    """Calls, errors and error rate of each tool, summed over the hours from `start` on of
    days' totals (`CallLedger.totals`, with `by_hour_tool`)."""
    hours = []
    for day in totals:
        first = datetime.fromisoformat(day["day"]).replace(tzinfo=UTC)
        hours += [
            {"by_tool": tools}
            for hour, tools in day.get("by_hour_tool", {}).items()
            if first + timedelta(hours=int(hour)) >= start
        ]
    return by_tool_of_days(hours)


def window(range_name: str, now: datetime) -> tuple[datetime, timedelta, int]:
    """The start, bucket length and bucket count of a chart range ending in the bucket of now."""
    if range_name not in RANGES:
        raise LedgerQueryError(f"range: must be one of {', '.join(RANGES)}")
    step, count = RANGES[range_name]
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    last = epoch + step * ((now - epoch) // step)  # the bucket holding now
    return last - step * (count - 1), step, count


def chart(
    records: Iterable[CallRecord], start: datetime, step: timedelta, count: int
) -> dict[str, Any]:
    """Per bucket: calls, errors, p50 and p99 duration (ms); and outcomes over the range."""
    calls = [0] * count
    errors = [0] * count
    durations: list[list[float]] = [[] for _ in range(count)]
    outcomes = {outcome: 0 for outcome in OUTCOMES}
    every: list[float] = []
    for record in records:
        at = datetime.fromisoformat(record.at.replace("Z", "+00:00"))
        index = (at - start) // step
        if not 0 <= index < count:
            continue
        calls[index] += 1
        errors[index] += record.outcome in ERRORS
        outcomes[record.outcome] += 1
        if record.duration_ms > 0:
            durations[index].append(record.duration_ms)
            every.append(record.duration_ms)
    buckets = [
        {
            "start": iso(start + step * i),
            "calls": calls[i],
            "errors": errors[i],
            "p50_ms": percentile(durations[i], 0.5),
            "p99_ms": percentile(durations[i], 0.99),
        }
        for i in range(count)
    ]
    totals = {
        "calls": sum(calls),
        "errors": sum(errors),
        "p50_ms": percentile(every, 0.5),
        "p99_ms": percentile(every, 0.99),
    }
    return {"buckets": buckets, "outcomes": outcomes, "totals": totals}


def iso(moment: datetime) -> str:
    return moment.isoformat(timespec="seconds").replace("+00:00", "Z")
