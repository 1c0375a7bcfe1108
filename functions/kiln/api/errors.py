"""The one error table: each domain error's HTTP status, REST error code and JSON-RPC code.

A refusal is raised where it is found (catalog rules, the store, the authoring service,
access control, bundles) as a domain exception; the REST app and the MCP routes turn it
into an answer here, and only here. The lookup walks the class's MRO, so a new subclass
answers like its parent until it is given a row of its own.

(JSON-RPC errors of the MCP protocol itself live in `kiln.protocol.errors`; this table is
for what the application layer refuses.)
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from kiln.auth.keys import (
    InvalidKeyNameError,
    InvalidScopeError,
    KeyNameTakenError,
    KeyNotFoundError,
)
from kiln.auth.policy import AuthError
from kiln.auth.secrets import InvalidSecretError, SecretNotFoundError
from kiln.authoring.service import ArgumentsRejectedError, UndeclaredSecretError
from kiln.bundles.store import AmbiguousBundleIdError, BundleIdError, BundleStateError
from kiln.catalog.rules import RuleError
from kiln.catalog.store import (
    CatalogError,
    NameMismatchError,
    NameTakenError,
    NotDeletedError,
    RevisionNotFoundError,
    RevisionRequiredError,
    StaleRevisionError,
    ToolNotFoundError,
)

# JSON-RPC codes of the implementation-defined server-error range (-32000 to -32099).
UNAUTHORIZED = -32001
REFUSED = -32002  # a request the application refused (a rule, a conflict, a missing thing)
INTERNAL = -32603


class ApiError(Exception):
    """A refusal of the HTTP request itself (body too large, bad JSON, a bad header), which
    carries its own status and code."""

    def __init__(self, status: int, code: str, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status, self.code, self.extra = status, code, extra


def _violations(error: BaseException) -> dict[str, Any]:
    assert isinstance(error, RuleError)
    return {
        "violations": [
            {"field": v.field, "rule": v.rule, "message": v.message} for v in error.violations
        ]
    }


def _current_revision(error: BaseException) -> dict[str, Any]:
    assert isinstance(error, StaleRevisionError)
    return {"current_revision": error.current}


@dataclass(frozen=True)
class ErrorRule:
    status: int  # HTTP status of the REST answer
    code: str  # `error.code` of the REST body
    jsonrpc: int = REFUSED  # the JSON-RPC error code when it ends an MCP request
    details: Callable[[BaseException], dict[str, Any]] | None = field(default=None)


ERRORS: dict[type[BaseException], ErrorRule] = {
    RuleError: ErrorRule(422, "invalid_tool", details=_violations),
    ArgumentsRejectedError: ErrorRule(422, "invalid_arguments"),
    CatalogError: ErrorRule(400, "bad_request"),
    NameMismatchError: ErrorRule(422, "name_mismatch"),
    NameTakenError: ErrorRule(409, "name_taken"),
    ToolNotFoundError: ErrorRule(404, "not_found"),
    RevisionNotFoundError: ErrorRule(404, "not_found"),
    StaleRevisionError: ErrorRule(412, "stale_revision", details=_current_revision),
    RevisionRequiredError: ErrorRule(428, "revision_required"),
    BundleStateError: ErrorRule(409, "bundle_state"),
    BundleIdError: ErrorRule(404, "not_found"),
    AmbiguousBundleIdError: ErrorRule(409, "ambiguous_id"),
    NotDeletedError: ErrorRule(409, "not_deleted"),
    InvalidKeyNameError: ErrorRule(422, "invalid_key"),
    InvalidScopeError: ErrorRule(422, "invalid_key"),
    KeyNameTakenError: ErrorRule(409, "name_taken"),
    KeyNotFoundError: ErrorRule(404, "not_found"),
    InvalidSecretError: ErrorRule(422, "invalid_secret"),
    UndeclaredSecretError: ErrorRule(422, "undeclared_secret"),
    SecretNotFoundError: ErrorRule(404, "not_found"),
    AuthError: ErrorRule(401, "unauthorized", jsonrpc=UNAUTHORIZED),
}
INTERNAL_RULE = ErrorRule(500, "internal", jsonrpc=INTERNAL)
AUTH_CODES = {400: "invalid_request", 401: "unauthorized", 403: "forbidden"}


def rule_for(error: BaseException) -> ErrorRule:
    """The row of the nearest class in `error`'s MRO that has one."""
    for cls in type(error).__mro__:
        rule = ERRORS.get(cls)
        if rule is not None:
            return rule
    return INTERNAL_RULE


def rest_status_and_body(error: BaseException) -> tuple[int, dict[str, Any]]:
    """The REST answer to a refusal: its status and `{"error": {code, message, ...}}`."""
    if isinstance(error, ApiError):
        return error.status, {"error": {"code": error.code, "message": str(error), **error.extra}}
    if isinstance(error, AuthError):
        return error.status, {"error": {"code": AUTH_CODES[error.status], "message": error.message}}
    rule = rule_for(error)
    body: dict[str, Any] = {"code": rule.code, "message": str(error)}
    if rule.details is not None:
        body.update(rule.details(error))
    return rule.status, {"error": body}


def rest_response(error: BaseException) -> Response:
    status, body = rest_status_and_body(error)
    headers = {"www-authenticate": error.www_authenticate} if isinstance(error, AuthError) else {}
    return JSONResponse(body, status_code=status, headers=headers)


def jsonrpc_response(error: BaseException) -> Response:
    """A refusal that ends an MCP request before the protocol layer saw it (auth, mostly)."""
    if isinstance(error, AuthError):
        status, message = error.status, f"Unauthorized: {error.message}"
        headers = {"www-authenticate": error.www_authenticate}
    else:
        status, body = rest_status_and_body(error)
        message, headers = body["error"]["message"], {}
    wire = {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": rule_for(error).jsonrpc, "message": message},
    }
    return Response(
        json.dumps(wire), status_code=status, headers=headers, media_type="application/json"
    )


async def _handle(_: Request, error: Exception) -> Response:
    return rest_response(error)


def install(app: FastAPI) -> None:
    """Answer every refusal in the table (and ApiError) through `rest_response`."""
    handled: list[type[BaseException]] = [ApiError, *ERRORS]
    for cls in handled:
        if issubclass(cls, Exception):
            app.add_exception_handler(cls, _handle)
