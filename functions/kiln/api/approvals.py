"""REST: approvals that wait for a person (kiln.tasks.approving).

GET  /api/approvals                  the approvals you are an approver of, newest first
GET  /api/approvals/{id}             one of them
POST /api/approvals/{id}/approve     -> 200 the approval, now `approved` (its call runs)
POST /api/approvals/{id}/deny        {"reason": "..."}? -> 200 the approval, now `denied`

Any key or token may ask (`call` scope); what it is shown and may decide is what the
approvals list it for: 404 for an approval it is not an approver of, 403 when it may not
decide it (it is the caller; a listed key that is not an author key), 409 once it is decided
or expired (a second approve is refused, never run twice).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from kiln.api.common import json_body, kiln_of, present, require
from kiln.api.errors import ApiError
from kiln.tasks.approving import ApprovalTasks

router = APIRouter(prefix="/api/approvals", tags=["approvals"])
MAX_REASON = 500


def _approvals(request: Request) -> ApprovalTasks:
    return present(kiln_of(request).tasks.waiting, "not_found", "this server keeps no approvals")


@router.get("")
async def list_approvals(request: Request) -> dict[str, Any]:
    who = await require(request, "call")
    return {"approvals": await _approvals(request).pending_for(who)}


@router.get("/{approval_id}")
async def get_approval(approval_id: str, request: Request) -> dict[str, Any]:
    who = await require(request, "call")
    return await _approvals(request).show(approval_id, who)


@router.post("/{approval_id}/approve")
async def approve(approval_id: str, request: Request) -> dict[str, Any]:
    who = await require(request, "call")
    return await _approvals(request).approve(approval_id, who)


@router.post("/{approval_id}/deny")
async def deny(approval_id: str, request: Request) -> dict[str, Any]:
    who = await require(request, "call")
    reason = None
    if int(request.headers.get("content-length") or 0) > 0:
        body = await json_body(request)
        reason = body.get("reason") if isinstance(body, dict) else None
        if not isinstance(body, dict) or not (
            reason is None or (isinstance(reason, str) and len(reason) <= MAX_REASON)
        ):
            raise ApiError(
                422, "invalid_body", f'body: must be {{"reason": text of at most {MAX_REASON}}}'
            )
    return await _approvals(request).deny(approval_id, who, reason or None)
