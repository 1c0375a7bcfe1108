"""REST: /api/keys. API keys through the server's admin API (author keys only).

POST /api/keys {"name", "scope", "view"?, "quota"?, "confirm"?, "approvers"?} -> 201 with the
key, shown this once; GET /api/keys lists them (never a secret); PUT /api/keys/{name}/binding
{"view", "quota", "confirm", "approvers"} sets a key's view, limits and approvals policy
(`confirm`: "destructive" or "writes", see kiln.access.approvals; `approvers`: who approves
instead of the caller, kiln.access.waiting; what is left out is cleared); DELETE
/api/keys/{name} revokes one, refused by this server from its next request (the key store
forgets its cached lookup at once). Refusals (bad name, scope, view, quota or approvers, a taken
name, no such key) are domain errors, answered by `kiln.api.errors`.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from kiln.access.quotas import Quota, QuotaRuleError, check_quota
from kiln.access.views import check_view_name
from kiln.api.common import blocking, json_body, kiln_of, require
from kiln.api.errors import ApiError
from kiln.identity.audit import record_write
from kiln.identity.keys import (
    InvalidConfirmError,
    KeyRecord,
    check_confirm,
    check_key_approvers,
)

router = APIRouter(prefix="/api/keys", tags=["keys"])


def key_json(record: KeyRecord) -> dict[str, Any]:
    body = asdict(record)
    body["id"] = record.key_id  # the name the studio reads
    return body


@router.post("", status_code=201)
async def create_key(request: Request) -> JSONResponse:
    who = await require(request)
    payload = await json_body(request)
    view, quota, confirm, approvers = _binding(payload, '{"name": "...", "scope": "call"}')
    keys = kiln_of(request).callers.keys
    name: Any = payload.get("name")  # the key store says what is wrong with it
    scope: Any = payload.get("scope", "call")
    record, secret = await blocking(
        lambda: keys.create(
            name, scope, view=view, quota=quota, confirm=confirm, approvers=approvers
        )
    )
    record_write(who, action="key.create", tool_name="", key=record.name)
    return JSONResponse({**key_json(record), "key": secret}, status_code=201)


@router.get("")
async def list_keys(request: Request) -> dict[str, Any]:
    """Every key; a live key with a quota also says how much of it is used (`usage`)."""
    await require(request)
    kiln = kiln_of(request)
    records = await blocking(kiln.callers.keys.list)

    def with_usage(record: KeyRecord) -> dict[str, Any]:
        body = key_json(record)
        quotas = kiln.gate.quotas
        if quotas is not None and not record.revoked and not record.quota.empty:
            body["usage"] = quotas.usage(f"key:{record.key_id}")
        return body

    return {"keys": await blocking(lambda: [with_usage(record) for record in records])}


@router.delete("/{name}")
async def revoke_key(name: str, request: Request) -> dict[str, Any]:
    who = await require(request)
    record = await blocking(kiln_of(request).callers.keys.revoke, name)
    record_write(who, action="key.revoke", tool_name="", key=record.name)
    return key_json(record)


@router.put("/{name}/binding")
async def bind_key(name: str, request: Request) -> dict[str, Any]:
    who = await require(request)
    body = await json_body(request)
    view, quota, confirm, approvers = _binding(body, '{"view": ..., "quota": {...}}')
    keys = kiln_of(request).callers.keys
    record = await blocking(
        lambda: keys.bind(name, view=view, quota=quota, confirm=confirm, approvers=approvers)
    )
    record_write(who, action="key.bind", tool_name="", key=record.name)
    return key_json(record)


def _binding(payload: object, shape: str) -> tuple[str | None, Quota, str | None, tuple[str, ...]]:
    """The view, quota, confirm policy and approvers a create or bind body asks for (absent:
    unbound, no limits, no approvals); 422 for a body that is not an object (`shape` says
    what it is)."""
    if not isinstance(payload, dict):
        raise ApiError(422, "invalid_key", f"body: must be {shape}")
    view = payload.get("view")
    if view is not None:
        view = check_view_name(view)
    try:
        confirm = check_confirm(payload.get("confirm"))
        approvers = check_key_approvers(payload.get("approvers"), confirm)
        return view, check_quota(payload.get("quota")), confirm, approvers
    except (QuotaRuleError, InvalidConfirmError) as error:
        raise ApiError(422, "invalid_key", str(error)) from None
