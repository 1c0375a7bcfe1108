"""/api/calls: the call ledger (who called what, when, with which outcome)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request

from kiln.accounting import usage
from kiln.accounting.ledger import CallLedger, LedgerQuery, LedgerQueryError
from kiln.api.common import blocking, kiln_of, present, require
from kiln.api.sight import sight

router = APIRouter()


def _ledger(request: Request) -> CallLedger:
    off = "the call ledger is off on this server (KILN_LEDGER)"
    return present(kiln_of(request).gate.ledger, "ledger_off", off)


@router.get("/api/calls")
async def list_calls(request: Request, where: Annotated[LedgerQuery, Depends()]) -> dict[str, Any]:
    """Ledger entries, newest first; `next_cursor` continues (null on the last page)."""
    seen = await sight(request, await require(request))
    await kiln_of(request).gate.after.flush()  # calls this process answered are all in
    entries, next_cursor = await blocking(_ledger(request).query, where)
    if seen.bound:  # the calls of its view's tools only (a page may then come short)
        names = seen.names()
        entries = [entry for entry in entries if entry.tool in names]
    return {"calls": [entry.as_json() for entry in entries], "next_cursor": next_cursor}


@router.get("/api/calls/by-tool")
async def calls_by_tool(
    request: Request, hours: int | None = None, days: int | None = None
) -> dict[str, Any]:
    """Calls, errors and error rate of each tool: over the last `hours` (1 to 720, default
    24: the current UTC hour so far and the `hours - 1` whole hours before it; read from the
    hourly totals of the days they span), or over the last `days` UTC days counting today (1
    to 30; the days' totals). One read of each day's totals, however many calls it had."""
    seen = await sight(request, await require(request))
    if hours is not None and days is not None:
        raise LedgerQueryError("hours, days: give one of them, not both")
    if days is not None and not 1 <= days <= 30:
        raise LedgerQueryError("days: must be from 1 to 30")
    if hours is not None and not 1 <= hours <= 720:
        raise LedgerQueryError("hours: must be from 1 to 720")
    ledger = _ledger(request)
    await kiln_of(request).gate.after.flush()
    end = datetime.fromtimestamp(ledger.now(), UTC)
    if days is not None:
        first = end.date() - timedelta(days=days - 1)
        each = [(first + timedelta(days=n)).isoformat() for n in range(days)]
        since = datetime(first.year, first.month, first.day, tzinfo=UTC)
    else:
        since, each = usage.hour_window(24 if hours is None else hours, end)
    read = await asyncio.gather(*(blocking(ledger.totals, day) for day in each))
    totals = [seen.totals(day) for day in read]
    if days is not None:
        tools = usage.by_tool_of_days(totals)
    else:
        tools = usage.by_tool_of_hours(totals, since)
    return {"since": usage.iso(since), "until": usage.iso(end), "tools": tools}


@router.get("/api/calls/chart")
async def call_chart(request: Request, tool: str, range: str = "day") -> dict[str, Any]:
    """One tool's calls, errors and p50/p99 duration per bucket, and its outcomes, over the
    last hour (5-minute buckets), day (hours) or month (30 days)."""
    seen = await sight(request, await require(request))
    ledger = _ledger(request)
    await kiln_of(request).gate.after.flush()
    now = datetime.fromtimestamp(ledger.now(), UTC)
    start, step, count = usage.window(range, now)
    end = start + step * count

    def read() -> dict[str, Any]:
        hidden = seen.bound and tool not in seen.names()  # as for a tool with no calls
        records = [] if hidden else ledger.between(start, end, tool=tool)
        return usage.chart(records, start, step, count)

    body = await blocking(read)
    return {"tool": tool, "range": range, "bucket_s": int(step.total_seconds()), **body}


@router.get("/api/calls/totals")
async def call_totals(request: Request, day: str | None = None) -> dict[str, Any]:
    """Calls, outcomes and run-seconds of one UTC day (default today), per caller and tool."""
    seen = await sight(request, await require(request))
    ledger = _ledger(request)
    await kiln_of(request).gate.after.flush()
    if day is None:
        from datetime import UTC, datetime

        day = datetime.fromtimestamp(ledger.now(), UTC).date().isoformat()
    totals: dict[str, Any] = seen.totals(await blocking(ledger.totals, day))
    return totals
