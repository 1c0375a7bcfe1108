"""REST: /api/tools/{ref}/secrets. A tool's secrets through the server's admin API.

GET lists the names the tool declares (and any still set that it no longer declares), each
set or not, never a value. PUT /{secret} {"value": "..."} sets one the tool declares; DELETE
removes one. Values are never echoed, logged or returned.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from kiln.api.shared import kiln_of, refusal, require_author, small_json
from kiln.auth.audit import record_write
from kiln.auth.secrets import InvalidSecretError, SecretError, SecretNotFoundError
from kiln.catalog.model import Tool
from kiln.catalog.store import ToolNotFoundError

router = APIRouter(prefix="/api/tools/{ref}/secrets", tags=["secrets"])


async def _tool(request: Request, ref: str) -> Tool | JSONResponse:
    try:
        tool: Tool = await asyncio.to_thread(kiln_of(request).store.get, ref)
    except ToolNotFoundError as error:
        return refusal(404, "not_found", str(error))
    return tool


def _failed(error: SecretError) -> JSONResponse:
    if isinstance(error, SecretNotFoundError):
        return refusal(404, "not_found", str(error))
    return refusal(422, "invalid_secret", str(error))


@router.get("", response_model=None)
async def list_secrets(ref: str, request: Request) -> Any:
    await require_author(request)
    tool = await _tool(request, ref)
    if isinstance(tool, JSONResponse):
        return tool
    stored = set(await asyncio.to_thread(kiln_of(request).access.secrets.names, tool.id))
    declared = set(tool.head.secrets)
    return {
        "tool": tool.name,
        "secrets": [
            {"name": name, "declared": name in declared, "set": name in stored}
            for name in sorted(declared | stored)
        ],
    }


@router.put("/{secret}", response_model=None)
async def set_secret(ref: str, secret: str, request: Request) -> Any:
    who = await require_author(request)
    payload = await small_json(request)
    if isinstance(payload, JSONResponse):
        return payload
    tool = await _tool(request, ref)
    if isinstance(tool, JSONResponse):
        return tool
    if secret not in tool.head.secrets:
        declared = ", ".join(tool.head.secrets) or "none"
        return refusal(
            422,
            "undeclared_secret",
            f"secret {secret[:64]!r}: tool {tool.name!r} does not declare it (it declares: "
            f'{declared}); add it to "secrets" in the tool\'s definition first',
        )
    value = payload.get("value")
    if not isinstance(value, str):
        return refusal(422, "invalid_secret", 'value: required; send {"value": "<the secret>"}')
    try:
        await asyncio.to_thread(kiln_of(request).access.secrets.set, tool.id, secret, value)
    except InvalidSecretError as error:
        return _failed(error)
    record_write(who, action="secret.set", tool_name=tool.name, tool_id=tool.id, secret=secret)
    return {"name": secret, "declared": True, "set": True}


@router.delete("/{secret}", response_model=None)
async def delete_secret(ref: str, secret: str, request: Request) -> Any:
    who = await require_author(request)
    tool = await _tool(request, ref)
    if isinstance(tool, JSONResponse):
        return tool
    try:
        await asyncio.to_thread(kiln_of(request).access.secrets.delete, tool.id, secret)
    except SecretError as error:
        return _failed(error)
    record_write(who, action="secret.delete", tool_name=tool.name, tool_id=tool.id, secret=secret)
    return {"name": secret, "declared": secret in tool.head.secrets, "set": False}
