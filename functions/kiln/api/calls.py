"""/api/calls: the call ledger (who called what, when, with which outcome)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from kiln.access.ledger import CallLedger
from kiln.api.common import blocking, kiln_of, require
from kiln.api.errors import ApiError

router = APIRouter()


def _ledger(request: Request) -> CallLedger:
    ledger = kiln_of(request).gate.ledger
    if ledger is None:
        raise ApiError(404, "ledger_off", "the call ledger is off on this server (KILN_LEDGER)")
    return ledger


@router.get("/api/calls")
async def list_calls(
    request: Request,
    tool: str | None = None,
    caller: str | None = None,
    outcome: str | None = None,
    since: str | None = None,
    until: str | None = None,
    limit: int = 100,
    cursor: str | None = None,
) -> dict[str, Any]:
    """Ledger entries, newest first; `next_cursor` continues (null on the last page)."""
    await require(request)
    await kiln_of(request).gate.after.flush()  # calls this process answered are all in
    entries, next_cursor = await blocking(
        _ledger(request).query, tool=tool, caller=caller, outcome=outcome, since=since,
        until=until, limit=limit, cursor=cursor,
    )  # fmt: skip
    return {"calls": [entry.as_json() for entry in entries], "next_cursor": next_cursor}


@router.get("/api/calls/totals")
async def call_totals(request: Request, day: str | None = None) -> dict[str, Any]:
    """Calls, outcomes and run-seconds of one UTC day (default today), per caller and tool."""
    await require(request)
    ledger = _ledger(request)
    await kiln_of(request).gate.after.flush()
    if day is None:
        from datetime import UTC, datetime

        day = datetime.fromtimestamp(ledger.now(), UTC).date().isoformat()
    totals: dict[str, Any] = await blocking(ledger.totals, day)
    return totals
