"""What every router needs from a request: the running Kiln, the caller, the body, time."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from typing import Any, TypeVar

from fastapi import Request
from fastapi.responses import JSONResponse

from kiln.api import auth
from kiln.api.errors import ApiError
from kiln.api.mcp_serving import kiln_of as kiln_of
from kiln.api.mcp_serving import read_capped as read_capped
from kiln.api.mcp_serving import time_left_s as time_left_s
from kiln.authoring.serialise import etag
from kiln.catalog.model import Tool
from kiln.identity.policy import Permission, Principal
from kiln.protocol.jsontext import load_json, lone_surrogate_path, may_hold_surrogates

T = TypeVar("T")


async def blocking(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run a blocking call (boto3, the authoring service) off the event loop."""
    return await asyncio.to_thread(fn, *args, **kwargs)


def present(part: T | None, code: str, message: str) -> T:
    """A part some servers run without (the ledger, approvals): 404 `code` where it is off."""
    if part is None:
        raise ApiError(404, code, message)
    return part


async def require(request: Request, need: Permission = "author", resource: str = "") -> Principal:
    """The caller, when it may do what `need` names; AuthError (401/403) for anyone else."""
    return await auth.require(request, need, resource)


async def json_body(request: Request) -> Any:
    """The body as JSON: UTF-8, strict (no NaN), and no lone UTF-16 surrogates (RFC 7493)."""
    cap = kiln_of(request).api_settings.max_body_bytes
    raw = await read_capped(request, cap)
    if len(raw) > cap:
        raise ApiError(413, "too_large", f"body: larger than {cap} bytes")
    try:
        value = load_json(raw.decode("utf-8"))
    except UnicodeDecodeError as error:
        raise ApiError(400, "bad_json", f"body: not valid UTF-8 (byte {error.start})") from None
    except json.JSONDecodeError as error:
        where = f" (line {error.lineno}, column {error.colno})"
        raise ApiError(400, "bad_json", f"body: not valid JSON{where}") from None
    except (ValueError, RecursionError):  # NaN / Infinity, or nested past the parser
        raise ApiError(400, "bad_json", "body: not valid JSON") from None
    place = lone_surrogate_path(value) if may_hold_surrogates(raw) else None
    if place is not None:
        raise ApiError(
            400,
            "bad_json",
            f"body: {place} holds a \\u escape for a lone UTF-16 surrogate, which is not "
            "valid Unicode (RFC 7493); send the character itself or a valid pair",
        )
    return value


def if_match(request: Request) -> int | None:
    """The revision number in If-Match: `"3"`, `3` or `W/"3"`; refuses anything else."""
    value = request.headers.get("if-match")
    if value is None or not value.strip():
        return None
    text = value.strip().removeprefix("W/").strip('"')
    if not re.fullmatch(r"[0-9]{1,9}", text):
        raise ApiError(
            400,
            "bad_if_match",
            'If-Match: must be the revision number you read, as its ETag gives it (e.g. "3")',
        )
    return int(text)


def tagged(body: dict[str, Any], tool: Tool, status: int = 200) -> JSONResponse:
    """A JSON answer about one tool, with its ETag."""
    return JSONResponse(body, status_code=status, headers={"ETag": etag(tool)})
