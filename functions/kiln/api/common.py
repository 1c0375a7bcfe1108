"""What every router needs from a request: the running Kiln, the caller, the body, time."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from typing import Any, TypeVar

from fastapi import Request
from fastapi.responses import JSONResponse

from kiln.api.errors import ApiError
from kiln.auth.policy import Permission, Principal
from kiln.authoring.serialise import etag
from kiln.catalog.model import Tool
from kiln.stack import Kiln

T = TypeVar("T")


def kiln_of(request: Request) -> Kiln:
    """The Kiln the app was composed over (`kiln.app.create_app` puts it on app.state)."""
    parts: Kiln = request.app.state.kiln
    return parts


async def blocking(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run a blocking call (boto3, the authoring service) off the event loop."""
    return await asyncio.to_thread(fn, *args, **kwargs)


async def require(request: Request, need: Permission = "author", resource: str = "") -> Principal:
    """The caller, when it may do what `need` names; AuthError (401/403) for anyone else."""
    return await kiln_of(request).access.require(request, need, resource)


def time_left_s(request: Request) -> float:
    """Seconds left to answer: from the Lambda context when Mangum gives one, else a budget."""
    context = request.scope.get("aws.context")
    if context is not None and hasattr(context, "get_remaining_time_in_millis"):
        return float(context.get_remaining_time_in_millis()) / 1000.0
    return kiln_of(request).settings.local_time_budget_s


async def read_capped(request: Request, cap: int) -> bytes:
    """The request body, or its first cap+1 bytes: enough to tell that it is too large."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        chunks.append(chunk)
        size += len(chunk)
        if size > cap:
            break
    return b"".join(chunks)


async def json_body(request: Request) -> Any:
    cap = kiln_of(request).settings.max_body_bytes
    raw = await read_capped(request, cap)
    if len(raw) > cap:
        raise ApiError(413, "too_large", f"body: larger than {cap} bytes")
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:
        where = (
            f" (line {error.lineno}, column {error.colno})"
            if isinstance(error, json.JSONDecodeError)
            else ""
        )
        raise ApiError(400, "bad_json", f"body: not valid JSON{where}") from None


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
