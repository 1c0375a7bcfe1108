"""REST: /api/keys. API keys through the server's admin API (author keys only).

POST /api/keys {"name", "scope"} -> 201 with the key, shown this once; GET /api/keys lists
them (never a secret); DELETE /api/keys/{name} revokes one, refused by this server from its
next request (the key store forgets its cached lookup at once). Refusals (bad name or scope,
a taken name, no such key) are domain errors, answered by `kiln.api.errors`.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from kiln.api.common import blocking, json_body, kiln_of, require
from kiln.api.errors import ApiError
from kiln.auth.audit import record_write
from kiln.auth.keys import KeyRecord

router = APIRouter(prefix="/api/keys", tags=["keys"])


def key_json(record: KeyRecord) -> dict[str, Any]:
    body = asdict(record)
    body["id"] = record.key_id  # the name the studio reads
    return body


@router.post("", status_code=201)
async def create_key(request: Request) -> JSONResponse:
    who = await require(request)
    payload = await json_body(request)
    if not isinstance(payload, dict):
        raise ApiError(422, "invalid_key", 'body: must be {"name": "...", "scope": "call"}')
    keys = kiln_of(request).access.keys
    record, secret = await blocking(keys.create, payload.get("name"), payload.get("scope", "call"))
    record_write(who, action="key.create", tool_name="", key=record.name)
    return JSONResponse({**key_json(record), "key": secret}, status_code=201)


@router.get("")
async def list_keys(request: Request) -> dict[str, Any]:
    await require(request)
    records = await blocking(kiln_of(request).access.keys.list)
    return {"keys": [key_json(record) for record in records]}


@router.delete("/{name}")
async def revoke_key(name: str, request: Request) -> dict[str, Any]:
    who = await require(request)
    record = await blocking(kiln_of(request).access.keys.revoke, name)
    record_write(who, action="key.revoke", tool_name="", key=record.name)
    return key_json(record)
