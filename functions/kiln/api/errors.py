"""The one error table: each domain error's HTTP status, REST error code and JSON-RPC code.

A refusal is raised where it is found (catalog rules, the store, the authoring service,
access control, bundles) as a domain exception; the REST app and the MCP routes turn it
into an answer here, and only here. The lookup walks the class's MRO, so a new subclass
answers like its parent until it is given a row of its own.

(Errors of the MCP protocol itself carry their code and statuses on their classes in
`kiln.protocol.errors`, which also writes every JSON-RPC error body, these included; this
table is for what the application layer refuses.)
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError
from fastapi import FastAPI, Request
from fastapi.responses import Response
from starlette.exceptions import HTTPException

from kiln.access.secrets import InvalidSecretError, SecretError, SecretNotFoundError
from kiln.access.views import (
    StaleViewError,
    ViewError,
    ViewExistsError,
    ViewNotFoundError,
    ViewRuleError,
)
from kiln.accounting.ledger import LedgerQueryError
from kiln.authoring.service import ArgumentsRejectedError, UndeclaredSecretError
from kiln.aws.clients import StoreUnavailableError
from kiln.bundles.store import AmbiguousBundleIdError, BundleIdError, BundleStateError
from kiln.catalog.errors import (
    BreakingChangeError,
    CatalogBusyError,
    CatalogError,
    NameMismatchError,
    NameTakenError,
    NotDeletedError,
    RevisionNotFoundError,
    RevisionRequiredError,
    StaleRevisionError,
    ToolNotFoundError,
)
from kiln.catalog.rules import RuleError
from kiln.identity.keys import (
    InvalidKeyNameError,
    InvalidScopeError,
    KeyNameTakenError,
    KeyNotFoundError,
    KeyStoreError,
)
from kiln.identity.policy import AuthError
from kiln.protocol.errors import REFUSED, UNAUTHORIZED, UNAVAILABLE, jsonrpc_error
from kiln.protocol.jsontext import dumps
from kiln.protocol.spec import INTERNAL_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND
from kiln.tasks.approving import ApprovalDecidedError, ApprovalNotFoundError, NotAnApproverError

log = logging.getLogger(__name__)


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


def _findings(error: BaseException) -> dict[str, Any]:
    assert isinstance(error, BreakingChangeError)
    return {"findings": error.findings}


def _current_revision(error: BaseException) -> dict[str, Any]:
    assert isinstance(error, StaleRevisionError)
    return {"current_revision": error.current}


@dataclass(frozen=True)
class Refusal:
    status: int  # HTTP status of the REST answer
    code: str  # `error.code` of the REST body
    jsonrpc: int = REFUSED  # the JSON-RPC error code when it ends an MCP request
    details: Callable[[BaseException], dict[str, Any]] | None = field(default=None)


def _problems(error: BaseException) -> dict[str, Any]:
    assert isinstance(error, ViewRuleError)
    return {"problems": [{"field": f, "message": m} for f, m in error.problems]}


def _current_view_revision(error: BaseException) -> dict[str, Any]:
    assert isinstance(error, StaleViewError)
    return {"current_revision": error.current}


ERRORS: dict[type[BaseException], Refusal] = {
    RuleError: Refusal(422, "invalid_tool", details=_violations),
    ArgumentsRejectedError: Refusal(422, "invalid_arguments"),
    CatalogError: Refusal(400, "bad_request"),
    NameMismatchError: Refusal(422, "name_mismatch"),
    NameTakenError: Refusal(409, "name_taken"),
    ToolNotFoundError: Refusal(404, "not_found"),
    RevisionNotFoundError: Refusal(404, "not_found"),
    StaleRevisionError: Refusal(412, "stale_revision", details=_current_revision),
    CatalogBusyError: Refusal(409, "catalog_busy"),
    BreakingChangeError: Refusal(409, "breaking_change", details=_findings),
    RevisionRequiredError: Refusal(428, "revision_required"),
    BundleStateError: Refusal(409, "bundle_state"),
    BundleIdError: Refusal(404, "not_found"),
    AmbiguousBundleIdError: Refusal(409, "ambiguous_id"),
    NotDeletedError: Refusal(409, "not_deleted"),
    UndeclaredSecretError: Refusal(422, "undeclared_secret"),
    AuthError: Refusal(401, "unauthorized", jsonrpc=UNAUTHORIZED),
    StoreUnavailableError: Refusal(503, "catalog_unavailable", jsonrpc=UNAVAILABLE),
    ViewError: Refusal(400, "bad_request"),
    ViewRuleError: Refusal(422, "invalid_view", details=_problems),
    ViewNotFoundError: Refusal(404, "not_found"),
    ViewExistsError: Refusal(409, "name_taken"),
    StaleViewError: Refusal(412, "stale_revision", details=_current_view_revision),
    LedgerQueryError: Refusal(400, "bad_query"),
    KeyStoreError: Refusal(400, "bad_request"),
    InvalidKeyNameError: Refusal(422, "invalid_key"),
    InvalidScopeError: Refusal(422, "invalid_key"),
    KeyNameTakenError: Refusal(409, "name_taken"),
    KeyNotFoundError: Refusal(404, "not_found"),
    ApprovalNotFoundError: Refusal(404, "not_found"),
    NotAnApproverError: Refusal(403, "not_an_approver"),
    ApprovalDecidedError: Refusal(409, "already_decided"),
    SecretError: Refusal(400, "bad_request"),
    InvalidSecretError: Refusal(422, "invalid_secret"),  # messages never carry the value
    SecretNotFoundError: Refusal(404, "not_found"),
}
INTERNAL_REFUSAL = Refusal(500, "internal", jsonrpc=INTERNAL_ERROR)
AUTH_CODES = {400: "invalid_request", 401: "unauthorized", 403: "forbidden"}


def refusal_for(error: BaseException) -> Refusal:
    """The row of the nearest class in `error`'s MRO that has one."""
    for cls in type(error).__mro__:
        rule = ERRORS.get(cls)
        if rule is not None:
            return rule
    return INTERNAL_REFUSAL


def rest_status_and_body(error: BaseException) -> tuple[int, dict[str, Any]]:
    """The REST answer to a refusal: its status and `{"error": {code, message, ...}}`."""
    if isinstance(error, ApiError):
        return error.status, {"error": {"code": error.code, "message": str(error), **error.extra}}
    if isinstance(error, AuthError):
        return error.status, {"error": {"code": AUTH_CODES[error.status], "message": error.message}}
    rule = refusal_for(error)
    body: dict[str, Any] = {"code": rule.code, "message": str(error)}
    if rule.details is not None:
        body.update(rule.details(error))
    return rule.status, {"error": body}


def _headers(error: BaseException) -> dict[str, str]:
    if isinstance(error, AuthError):
        return {"www-authenticate": error.www_authenticate}
    if isinstance(error, (StoreUnavailableError, CatalogBusyError)):
        return {"retry-after": str(error.retry_after_s)}
    return {}


def json_response(body: Any, status: int, headers: dict[str, str] | None = None) -> Response:
    """JSON that always encodes: a stray lone surrogate is written as its escape, not a 500."""
    return Response(dumps(body), status_code=status, headers=headers, media_type="application/json")


def rest_response(error: BaseException) -> Response:
    status, body = rest_status_and_body(error)
    return json_response(body, status, _headers(error))


def jsonrpc_response(error: BaseException) -> Response:
    """A refusal that ends an MCP request before the protocol layer saw it (auth, mostly)."""
    if isinstance(error, AuthError):
        status, message = error.status, f"Unauthorized: {error.message}"
        headers = {"www-authenticate": error.www_authenticate}
    else:
        status, body = rest_status_and_body(error)
        message, headers = body["error"]["message"], _headers(error)
    return json_response(jsonrpc_error(refusal_for(error).jsonrpc, message), status, headers)


def under_mcp(path: str) -> bool:
    """Whether `path` is an MCP endpoint or below one (where every answer is JSON-RPC)."""
    return any(path == root or path.startswith(root + "/") for root in ("/mcp", "/admin/mcp"))


def _jsonrpc_error(code: int, message: str, status: int, headers: dict[str, str]) -> Response:
    return json_response(jsonrpc_error(code, message), status, headers)


_ROUTING = {  # status -> (REST code, REST message, JSON-RPC code, JSON-RPC message)
    404: (
        "not_found",
        "no such route; the REST API is described at /api/docs",
        METHOD_NOT_FOUND,
        "Not found: MCP is served at /mcp and /admin/mcp (POST), not below them",
    ),
    405: (
        "method_not_allowed",
        "this route does not take that HTTP method (see the Allow header)",
        INVALID_REQUEST,
        "Method not allowed: this endpoint takes POST only (no SSE stream, no sessions)",
    ),
}


async def _handle(request: Request, error: Exception) -> Response:
    """A refusal in the table, in the shape of the path's edge: a JSON-RPC error under an MCP
    endpoint (an error raised before the protocol layer saw the request: a key the store
    could not look up), the REST body elsewhere."""
    if under_mcp(request.url.path) and not isinstance(error, ApiError):
        return jsonrpc_response(error)
    return rest_response(error)


async def _routing(request: Request, error: Exception) -> Response:
    """Starlette's own refusals (no route, wrong method) in Kiln's shapes, not `{"detail"}`."""
    assert isinstance(error, HTTPException)
    status, headers = error.status_code, dict(error.headers or {})
    code, message, rpc_code, rpc_message = _ROUTING.get(
        status, ("http_error", str(error.detail), INVALID_REQUEST, str(error.detail))
    )
    if under_mcp(request.url.path):
        if status == 405:
            headers["allow"] = "POST"
        return _jsonrpc_error(rpc_code, rpc_message, status, headers)
    return json_response({"error": {"code": code, "message": message}}, status, headers)


CONDITIONAL = frozenset({"TransactionCanceledException", "ConditionalCheckFailedException"})


async def _store_refused(request: Request, error: Exception) -> Response:
    """A store refusal no domain error translated: a conditional write that lost to another
    is still a 409 with a JSON body (and logged, so that its translation gets written);
    anything else the store said is internal."""
    assert isinstance(error, ClientError)
    if error.response.get("Error", {}).get("Code") not in CONDITIONAL:
        return await _internal(request, error)
    log.error("untranslated conditional failure on %s %s: %s", request.method,
              request.url.path, error)  # fmt: skip
    message = "another write changed this at the same moment; read it again and retry"
    if under_mcp(request.url.path):
        return _jsonrpc_error(REFUSED, f"Conflict: {message}", 409, {})
    return json_response({"error": {"code": "conflict", "message": message}}, 409)


async def _internal(request: Request, error: Exception) -> Response:
    """A failure nothing else caught: still JSON (the traceback goes to the log, not out)."""
    log.error("unhandled %s on %s %s", type(error).__name__, request.method, request.url.path)
    if under_mcp(request.url.path):
        return _jsonrpc_error(INTERNAL_ERROR, "Internal error", 500, {})
    body = {"error": {"code": "internal", "message": "internal error; the server log has details"}}
    return json_response(body, 500)


async def answer(request: Request, error: Exception) -> Response:
    """What `install` makes an app answer for `error`, for an app that loads this table only
    when something is refused (the public function's bare Starlette app)."""
    if isinstance(error, HTTPException):
        return await _routing(request, error)
    if isinstance(error, (ApiError, *ERRORS)):
        return await _handle(request, error)
    if isinstance(error, ClientError):
        return await _store_refused(request, error)
    return await _internal(request, error)


def install(app: FastAPI) -> None:
    """Answer every refusal in the table (and ApiError) through `rest_response`; routing
    refusals and anything unexpected as JSON too."""
    handled: list[type[BaseException]] = [ApiError, *ERRORS]
    for cls in handled:
        if issubclass(cls, Exception):
            app.add_exception_handler(cls, _handle)
    app.add_exception_handler(HTTPException, _routing)
    app.add_exception_handler(ClientError, _store_refused)
    app.add_exception_handler(Exception, _internal)
