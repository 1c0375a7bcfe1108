"""REST: /api/keys. Create (the key is in that answer and nowhere else), list, revoke.

Authors only. Only a key's hash is stored; listings show names, scopes, ids and last use.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from kiln.api.common import blocking, json_body, kiln_of, require
from kiln.api.errors import ApiError
from kiln.auth.keys import KeyRecord

router = APIRouter(prefix="/api/keys", tags=["keys"])


def key_json(record: KeyRecord) -> dict[str, Any]:
    return {
        "name": record.name,
        "scope": record.scope,
        "id": record.key_id,
        "created_at": record.created_at,
        "last_used_at": record.last_used_at,
        "revoked_at": record.revoked_at,
        "view": record.view,
    }


@router.post("", status_code=201)
async def create_key(request: Request) -> JSONResponse:
    await require(request)
    payload = await json_body(request)
    if not isinstance(payload, dict):
        raise ApiError(422, "invalid_key", 'body: must be {"name": "...", "scope": "call"}')
    keys = kiln_of(request).access.keys
    record, secret = await blocking(keys.create, payload.get("name"), payload.get("scope", "call"))
    return JSONResponse({**key_json(record), "key": secret}, status_code=201)


@router.get("")
async def list_keys(request: Request) -> dict[str, Any]:
    await require(request)
    records = await blocking(kiln_of(request).access.keys.list)
    return {"keys": [key_json(record) for record in records]}


@router.delete("/{name}")
async def revoke_key(name: str, request: Request) -> dict[str, Any]:
    await require(request)
    return key_json(await blocking(kiln_of(request).access.keys.revoke, name))
