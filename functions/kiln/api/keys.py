"""REST: /api/keys. API keys through the server's admin API (author keys only).

POST /api/keys {"name", "scope"} -> 201 with the key, shown this once; GET /api/keys lists
them (never a secret); DELETE /api/keys/{name} revokes one, refused by this server from its
next request (the key store forgets its cached lookup at once).
"""

from __future__ import annotations

import asyncio
from dataclasses import asdict
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from kiln.api.shared import kiln_of, refusal, require_author, small_json
from kiln.auth.audit import record_write
from kiln.auth.keys import (
    InvalidKeyNameError,
    InvalidScopeError,
    KeyNameTakenError,
    KeyNotFoundError,
    KeyRecord,
    KeyStoreError,
)

router = APIRouter(prefix="/api/keys", tags=["keys"])

STATUS: dict[type[KeyStoreError], tuple[int, str]] = {
    InvalidKeyNameError: (422, "invalid_key"),
    InvalidScopeError: (422, "invalid_key"),
    KeyNameTakenError: (409, "name_taken"),
    KeyNotFoundError: (404, "not_found"),
}


def key_json(record: KeyRecord) -> dict[str, Any]:
    body = asdict(record)
    body["quota"] = asdict(record.quota)
    body["id"] = record.key_id  # the name the studio reads
    return body


@router.post("", status_code=201, response_model=None)
async def create_key(request: Request) -> Any:
    who = await require_author(request)
    payload = await small_json(request)
    if isinstance(payload, JSONResponse):
        return payload
    name, scope = payload.get("name"), payload.get("scope")
    if not isinstance(name, str) or not isinstance(scope, str):
        return refusal(422, "invalid_key", 'send {"name": "<key name>", "scope": "call|author"}')
    try:
        record, secret = await asyncio.to_thread(kiln_of(request).access.keys.create, name, scope)
    except KeyStoreError as error:
        return refusal(*STATUS.get(type(error), (400, "bad_request")), str(error))
    record_write(who, action="key.create", tool_name="", key=record.name)
    return JSONResponse({**key_json(record), "key": secret}, status_code=201)


@router.get("")
async def list_keys(request: Request) -> dict[str, Any]:
    await require_author(request)
    records = await asyncio.to_thread(kiln_of(request).access.keys.list)
    return {"keys": [key_json(record) for record in records]}


@router.delete("/{name}", response_model=None)
async def revoke_key(name: str, request: Request) -> Any:
    who = await require_author(request)
    try:
        record = await asyncio.to_thread(kiln_of(request).access.keys.revoke, name)
    except KeyStoreError as error:
        return refusal(*STATUS.get(type(error), (400, "bad_request")), str(error))
    record_write(who, action="key.revoke", tool_name="", key=record.name)
    return key_json(record)
