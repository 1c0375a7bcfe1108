"""The MCP routes: /mcp (callers), /mcp/v/{view} (a published view) and /admin/mcp
(authors), over `kiln.protocol`.

The route authenticates, reads the capped body and hands (method, headers, body) to the
transport-agnostic endpoint; everything MCP happens there.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response
from mcp_types import INVALID_REQUEST
from starlette.background import BackgroundTask
from starlette.exceptions import HTTPException

from kiln.access.gate import bound_view
from kiln.api.common import blocking, kiln_of, read_capped, time_left_s
from kiln.api.errors import jsonrpc_response
from kiln.auth.policy import AuthError, Permission, Principal
from kiln.protocol.backend import CallContext
from kiln.service import AFTER_RESPONSE, VIEW_KEY

# Every method reaches the protocol layer, which answers all but POST with a JSON-RPC 405;
# methods outside this list get the same answer from the app's routing error handler.
METHODS = ["GET", "POST", "DELETE", "PUT", "PATCH", "OPTIONS", "TRACE"]
public_router = APIRouter(include_in_schema=False)
admin_router = APIRouter(include_in_schema=False)


async def _serve(request: Request, need: Permission, path: str) -> Response:
    parts = kiln_of(request)
    try:
        principal = await parts.access.require(request, need, path)
    except AuthError as error:
        return jsonrpc_response(error)
    who = None if principal.kind == "anonymous" else principal
    return await _answer(request, who, admin=need == "author")


async def _answer(
    request: Request, principal: Principal | None, *, admin: bool = False, view: str | None = None
) -> Response:
    """Hand the request to the MCP endpoint; ledger writes and quota refunds it leaves run
    once the answer is out (in Lambda, before the invocation returns: nothing is lost)."""
    from kiln.protocol import HttpRequest

    parts = kiln_of(request)
    body = await read_capped(request, parts.settings.max_body_bytes)
    headers = {name.lower(): value for name, value in request.headers.items()}
    after: list[Callable[[], None]] = []
    extra: dict[str, Any] = {AFTER_RESPONSE: after}
    if view is not None:
        extra[VIEW_KEY] = view
    ctx = CallContext(time_left_s=time_left_s(request), principal=principal, extra=extra)
    endpoint = parts.admin_endpoint if admin else parts.endpoint
    answer = await endpoint.handle(HttpRequest(request.method, headers, body), ctx)
    background = None
    if after and request.scope.get("aws.context") is not None:
        background = BackgroundTask(parts.gate.after.run, after)
    elif after:  # a server that keeps running: do not hold the connection for it
        parts.gate.after.start(after)
    return Response(
        answer.body, status_code=answer.status, headers=answer.headers, background=background
    )


@public_router.api_route("/mcp", methods=METHODS)
async def public_mcp(request: Request) -> Response:
    return await _serve(request, "call", "/mcp")


@admin_router.api_route("/admin/mcp", methods=METHODS)
async def admin_mcp(request: Request) -> Response:
    return await _serve(request, "author", "/admin/mcp")


@public_router.api_route("/mcp/v/{view}", methods=METHODS)
async def view_mcp(view: str, request: Request) -> Response:
    """A published view on its own path: its tools only; anonymous when the view says so."""
    parts = kiln_of(request)
    snapshot = await parts.snapshots.fresh()
    views = parts.views.views_ready(snapshot.version)
    if views is None:
        views = await blocking(parts.views.views_at, snapshot.version)
    found = views.get(view)
    if found is None or not found.published:  # unpublished looks like absent: no leak
        return _refusal(404, "Not found: no MCP endpoint at this path")
    path = f"/mcp/v/{view}"
    principal: Principal | None = None
    if request.headers.get("authorization"):
        try:
            who = await parts.access.require(request, "call", path)
        except AuthError as error:
            return jsonrpc_response(error)
        principal = None if who.kind == "anonymous" else who
    elif not found.anonymous:  # the view's setting, whatever KILN_PUBLIC_ANONYMOUS says
        challenge = parts.access.authenticator.challenge(
            need="call", resource_path=path, base_url=parts.access.base_url(request)
        )
        message = "this view needs a bearer credential (an API key or OAuth token)"
        return jsonrpc_response(AuthError(401, challenge, message))
    bound = bound_view(principal, views)
    if bound is not None and bound != view:
        return _refusal(
            403, f"Forbidden: this credential is bound to view {bound!r}; use /mcp/v/{bound}"
        )
    return await _answer(request, principal, view=view)


def _refusal(status: int, message: str) -> Response:
    wire = {"jsonrpc": "2.0", "id": None, "error": {"code": INVALID_REQUEST, "message": message}}
    return Response(json.dumps(wire), status_code=status, media_type="application/json")


@public_router.api_route("/mcp/{rest:path}", methods=METHODS)
@admin_router.api_route("/admin/mcp/{rest:path}", methods=METHODS)
async def below_mcp(rest: str) -> Response:
    """Paths below an MCP endpoint: a JSON-RPC 404 (not a redirect to the endpoint)."""
    raise HTTPException(404)
