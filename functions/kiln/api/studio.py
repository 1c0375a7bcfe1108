"""REST routes the studio needs beside the tool API: who am I, and a dry-run save.

`POST /api/tools/validate` applies exactly the rules a save applies (`check_draft`) and adds
a syntax check of the script, so the browser never carries a copy of the rules; for a tool
that exists, it says what saving the draft would break (`breaking`, kiln.catalog.breaking).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request

from kiln.api.common import blocking, json_body, kiln_of, require
from kiln.api.errors import ApiError
from kiln.catalog.breaking import findings
from kiln.catalog.errors import CatalogError
from kiln.catalog.model import definition_of
from kiln.catalog.rules import LANGUAGES, RuleError, check_draft
from kiln.catalog.syntax import (
    SyntaxCheckUnavailableError,
    SyntaxProblem,
    check_syntax,
    syntax_violation,
)

router = APIRouter(tags=["studio"])


@router.get("/api/whoami")
async def whoami(request: Request) -> dict[str, Any]:
    """The caller as the studio shows it: a call key opens a read-only studio."""
    principal = await require(request, "call")
    return {
        "kind": principal.kind,
        "name": principal.name,
        "label": principal.label,  # as revisions name their author (`created_by`)
        "scopes": sorted(principal.scopes),
    }


def _syntax(payload: dict[str, Any], node: Path | None) -> tuple[SyntaxProblem | None, bool]:
    """The script's first syntax error, and whether a checker ran at all."""
    code, language = payload.get("code"), payload.get("language")
    language = LANGUAGES.get(language.lower()) if isinstance(language, str) else None
    if not isinstance(code, str) or language is None or "\x00" in code:
        return None, False
    try:
        return check_syntax(language, code, node), True
    except SyntaxCheckUnavailableError:
        return None, False


def _violations(payload: dict[str, Any]) -> list[dict[str, str]]:
    try:
        check_draft(payload)
    except RuleError as error:
        return error.as_dicts()
    return []


@router.post("/api/tools/validate")
async def validate_tool(request: Request) -> dict[str, Any]:
    """Every violation a save of this body would get (field, rule, message), and the syntax."""
    await require(request, "author")
    payload = await json_body(request)
    if not isinstance(payload, dict):
        raise ApiError(422, "invalid_tool", "body: must be a JSON object (a tool definition)")
    settings = kiln_of(request).api_settings
    node = Path(settings.node_binary) if settings.node_binary else None
    violations = await blocking(_violations, payload)
    problem, checked = await blocking(_syntax, payload, node)
    if problem is not None:  # a save refuses it too, as this violation
        v = syntax_violation(problem)
        violations.append({"field": v.field, "rule": v.rule, "message": v.message})
    breaking = [] if violations else await blocking(_breaking, kiln_of(request), payload)
    return {
        "ok": not violations and problem is None,
        "violations": violations,
        "syntax": None if problem is None else problem.to_json(),
        "syntax_checked": checked,
        # What saving it over the tool's head would break (kiln.catalog.breaking): a save
        # must then say "breaking": true. Empty for a new tool.
        "breaking": breaking,
    }


def _breaking(kiln: Any, payload: dict[str, Any]) -> list[dict[str, Any]]:
    try:
        draft = check_draft(payload)
        head = kiln.authoring.get(draft.name).head
    except (RuleError, CatalogError):
        return []
    return [found.to_json() for found in findings(definition_of(head), definition_of(draft))]
