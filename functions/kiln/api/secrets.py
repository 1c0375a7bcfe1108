"""REST: /api/tools/{ref}/secrets. A tool's secrets through the server's admin API.

GET lists the names the tool declares (and any still set that it no longer declares), each
set or not, never a value. PUT /{secret} {"value": "..."} sets one the tool declares; DELETE
removes one. Values are never echoed, logged or returned.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from kiln.api.common import blocking, json_body, kiln_of, require
from kiln.api.errors import ApiError
from kiln.api.sight import sight

router = APIRouter(prefix="/api/tools/{ref}/secrets", tags=["secrets"])


@router.get("")
async def list_secrets(ref: str, request: Request) -> dict[str, Any]:
    who = await require(request)
    tool, secrets = await blocking(kiln_of(request).authoring.secret_status, ref)
    (await sight(request, who)).served(tool, ref)  # a tool its view hides: unknown
    return {"secrets": secrets}


@router.put("/{secret}")
async def set_secret(ref: str, secret: str, request: Request) -> dict[str, Any]:
    who = await require(request)
    payload = await json_body(request)
    value = payload.get("value") if isinstance(payload, dict) else None
    if not isinstance(value, str):
        raise ApiError(422, "invalid_secret", 'value: required; send {"value": "<the secret>"}')
    await blocking(kiln_of(request).authoring.set_secret, ref, secret, value, who)
    return {"name": secret, "set": True}


@router.delete("/{secret}")
async def delete_secret(ref: str, secret: str, request: Request) -> dict[str, Any]:
    who = await require(request)
    await blocking(kiln_of(request).authoring.delete_secret, ref, secret, who)
    return {"name": secret, "set": False}
