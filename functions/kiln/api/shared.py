"""What the keys and secrets routers need from a request: the running Kiln, an author, a body."""

from __future__ import annotations

import json
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse

from kiln.auth.policy import Principal

MAX_SMALL_BODY = 64 * 1024  # a key name or a secret value: far below this


def kiln_of(request: Request) -> Any:
    """The Kiln the app was composed over (`create_app` puts it on app.state)."""
    return request.app.state.kiln


async def require_author(request: Request) -> Principal:
    """The caller when it holds an author key; AuthError (401/403) for anyone else."""
    principal: Principal = await kiln_of(request).access.require(request, "author", "")
    return principal


def refusal(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status)


async def small_json(request: Request) -> dict[str, Any] | JSONResponse:
    """The body as a JSON object, or the 400/413 answer that says what is wrong with it."""
    raw = b""
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > MAX_SMALL_BODY:
            return refusal(413, "too_large", f"body: larger than {MAX_SMALL_BODY} bytes")
    try:
        payload = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return refusal(400, "bad_json", "body: not valid JSON")
    if not isinstance(payload, dict):
        return refusal(400, "bad_json", "body: must be a JSON object")
    return payload
