"""REST: /api/tools/{name}/secrets. The names a tool declares and whether each is set; set a
value; remove one. Values are write-only: no answer, log line or error ever carries one.

Authors only.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from kiln.api.common import blocking, json_body, kiln_of, require
from kiln.api.errors import ApiError

router = APIRouter(prefix="/api/tools/{ref}/secrets", tags=["secrets"])


@router.get("")
async def list_secrets(ref: str, request: Request) -> dict[str, Any]:
    await require(request)
    status = await blocking(kiln_of(request).authoring.secret_status, ref)
    return {"secrets": [{"name": name, "set": present} for name, present in status.items()]}


@router.put("/{secret}")
async def set_secret(ref: str, secret: str, request: Request) -> dict[str, Any]:
    await require(request)
    payload = await json_body(request)
    value = payload.get("value") if isinstance(payload, dict) else None
    if not isinstance(value, str):
        raise ApiError(422, "invalid_secret", 'value: required; send {"value": "<the secret>"}')
    parts = kiln_of(request)
    tool = await blocking(parts.authoring.get, ref)
    await blocking(parts.access.secrets.set, tool.id, secret, value)
    return {"name": secret, "set": True}


@router.delete("/{secret}")
async def remove_secret(ref: str, secret: str, request: Request) -> dict[str, Any]:
    await require(request)
    parts = kiln_of(request)
    tool = await blocking(parts.authoring.get, ref)
    await blocking(parts.access.secrets.delete, tool.id, secret)
    return {"name": secret, "set": False}
