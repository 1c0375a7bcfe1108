"""REST routes the studio needs beside the tool API: who am I, and a dry-run save.

`POST /api/tools/validate` applies exactly the rules a save applies (`check_draft`) and adds
a syntax check of the script, so the browser never carries a copy of the rules.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from kiln.catalog.rules import LANGUAGES, RuleError, check_draft
from kiln.catalog.syntax import SyntaxCheckUnavailableError, SyntaxProblem, check_syntax

router = APIRouter()


def _parts(request: Request) -> Any:
    return request.app.state.kiln


def _error(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status)


@router.get("/api/whoami")
async def whoami(request: Request) -> dict[str, Any]:
    """The caller as the studio shows it: a call key opens a read-only studio."""
    principal = await _parts(request).access.require(request, "call", "")
    return {"kind": principal.kind, "name": principal.name, "scopes": sorted(principal.scopes)}


async def _json_payload(request: Request, cap: int) -> Any:
    raw = b""
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > cap:
            raise ValueError(f"body: larger than {cap} bytes")
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        raise ValueError("body: not valid JSON") from None


def _language(payload: dict[str, Any]) -> str | None:
    value = payload.get("language")
    return LANGUAGES.get(value.lower()) if isinstance(value, str) else None


def _syntax(payload: dict[str, Any], node: Path | None) -> tuple[SyntaxProblem | None, bool]:
    """The script's first syntax error, and whether a checker ran at all."""
    code, language = payload.get("code"), _language(payload)
    if not isinstance(code, str) or language is None or "\x00" in code:
        return None, False
    try:
        return check_syntax(language, code, node), True
    except SyntaxCheckUnavailableError:
        return None, False


@router.post("/api/tools/validate", response_model=None)
async def validate_tool(request: Request) -> Any:
    """Every violation a save of this body would get (field, rule, message), and the syntax."""
    parts = _parts(request)
    await parts.access.require(request, "author", "")
    try:
        payload = await _json_payload(request, parts.settings.max_body_bytes)
    except ValueError as error:
        return _error(400, "bad_json", str(error))
    if not isinstance(payload, dict):
        return _error(422, "invalid_tool", "body: must be a JSON object (a tool definition)")
    try:
        await asyncio.to_thread(check_draft, payload)
        violations: list[dict[str, str]] = []
    except RuleError as error:
        violations = error.as_dicts()
    node = Path(parts.settings.node_binary) if parts.settings.node_binary else None
    problem, checked = await asyncio.to_thread(_syntax, payload, node)
    return {
        "ok": not violations and problem is None,
        "violations": violations,
        "syntax": None if problem is None else problem.to_json(),
        "syntax_checked": checked,
    }
