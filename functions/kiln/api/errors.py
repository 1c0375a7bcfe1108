"""The HTTP edge's answers to refusals: every `kiln.errors.KilnError` carries its own HTTP
status, REST code, JSON-RPC code and data, and is translated here once for REST
(`rest_response`) and, under an MCP path, by the MCP edge's one translation
(`kiln.protocol.errors.error_answer`); no table maps domain errors. Starlette's own
refusals (no route, wrong method), a store refusal no domain error translated and anything
unexpected are answered here too, as JSON in the shape of the path's edge.
"""

from __future__ import annotations

import logging
from typing import Any

from botocore.exceptions import ClientError
from fastapi import FastAPI, Request
from fastapi.responses import Response
from starlette.exceptions import HTTPException

from kiln.errors import REFUSED, KilnError
from kiln.protocol.errors import error_answer, jsonrpc_error
from kiln.protocol.jsontext import dumps
from kiln.protocol.spec import INTERNAL_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND

log = logging.getLogger(__name__)


class ApiError(KilnError):
    """A refusal of the HTTP request itself (body too large, bad JSON, a bad header), which
    carries its own status and REST code; `extra` members join the REST body."""

    def __init__(self, status: int, code: str, message: str, **extra: Any) -> None:
        super().__init__(message, data=extra or None)
        self.status, self.rest_code = status, code


def rest_status_and_body(error: KilnError) -> tuple[int, dict[str, Any]]:
    """The REST answer to a refusal: its status and `{"error": {code, message, **data}}`."""
    body: dict[str, Any] = {"code": error.rest_code, "message": error.message}
    body.update(error.data or {})
    return error.status, {"error": body}


def json_response(body: Any, status: int, headers: dict[str, str] | None = None) -> Response:
    """JSON that always encodes: a stray lone surrogate is written as its escape, not a 500."""
    return Response(dumps(body), status_code=status, headers=headers, media_type="application/json")


def rest_response(error: KilnError) -> Response:
    status, body = rest_status_and_body(error)
    return json_response(body, status, error.headers())


def jsonrpc_response(error: KilnError) -> Response:
    """A refusal that ends an MCP request before the protocol layer saw it (auth, mostly)."""
    status, body, headers = error_answer(error)
    return json_response(body, status, headers)


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
    """A refusal in the shape of the path's edge: a JSON-RPC error under an MCP endpoint (an
    error raised before the protocol layer saw the request: a key the store could not look
    up), the REST body elsewhere. One that REST never answers (a protocol error) is internal."""
    assert isinstance(error, KilnError)
    if under_mcp(request.url.path) and not isinstance(error, ApiError):
        return jsonrpc_response(error)
    if error.rest_code is None:
        return await _internal(request, error)
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
    """What `install` makes an app answer for `error`, for an app that loads this module only
    when something is refused (the public function's bare Starlette app)."""
    if isinstance(error, HTTPException):
        return await _routing(request, error)
    if isinstance(error, KilnError):
        return await _handle(request, error)
    if isinstance(error, ClientError):
        return await _store_refused(request, error)
    return await _internal(request, error)


def install(app: FastAPI) -> None:
    """Answer every refusal through `rest_response` (or the MCP edge's translation under an
    MCP path); routing refusals and anything unexpected as JSON too."""
    app.add_exception_handler(KilnError, _handle)
    app.add_exception_handler(HTTPException, _routing)
    app.add_exception_handler(ClientError, _store_refused)
    app.add_exception_handler(Exception, _internal)
