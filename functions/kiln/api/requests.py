"""The MCP routes' work, on Starlette alone (no FastAPI import): authenticate, read the capped
body, hand (method, headers, body) to the transport-agnostic endpoint.

The public function's app (`kiln.api.public`) is bare Starlette so that a cold start does not
import FastAPI and the REST API; `kiln.api.mcp` mounts the same functions in the full app.
"""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any

from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from kiln.access.gate import Work, bound_view
from kiln.auth.policy import AuthError, Permission, Principal
from kiln.protocol.backend import CallContext
from kiln.protocol.spec import INVALID_REQUEST
from kiln.protocol.talking import CAN_HOLD
from kiln.service import AFTER_RESPONSE, START_NOW, VIEW_KEY

if TYPE_CHECKING:
    from kiln.stack import Kiln


def kiln_of(request: Request) -> Kiln:
    """The Kiln the app was composed over (`kiln.app.create_app` puts it on app.state)."""
    parts: Kiln = request.app.state.kiln
    return parts


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


def auth_refusal(error: AuthError) -> Response:
    # The one error table, loaded only when a request is refused.
    from kiln.api.errors import jsonrpc_response

    return jsonrpc_response(error)


async def serve_mcp(request: Request, need: Permission, path: str) -> Response:
    parts = kiln_of(request)
    try:
        principal = await parts.access.require(request, need, path)
    except AuthError as error:
        return auth_refusal(error)
    who = None if principal.kind == "anonymous" else principal
    return await answer_mcp(request, who, admin=need == "author")


async def answer_mcp(
    request: Request, principal: Principal | None, *, admin: bool = False, view: str | None = None
) -> Response:
    """Hand the request to the MCP endpoint; ledger writes and quota refunds it leaves run
    once the answer is out (in Lambda, before the invocation returns: nothing is lost)."""
    from kiln.protocol import HttpRequest

    parts = kiln_of(request)
    body = await read_capped(request, parts.settings.max_body_bytes)
    headers = {name.lower(): value for name, value in request.headers.items()}
    after: list[Work] = []
    extra: dict[str, Any] = {AFTER_RESPONSE: after}
    if request.scope.get("aws.context") is not None:  # the invocation ends after it anyway
        extra[START_NOW] = True
    else:  # a process that keeps running can hold a 2025 call open for the client's answers
        extra[CAN_HOLD] = True
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
    if answer.stream is not None:
        return StreamingResponse(
            answer.stream, status_code=answer.status, headers=answer.headers, background=background
        )
    return Response(
        answer.body, status_code=answer.status, headers=answer.headers, background=background
    )


async def serve_view(request: Request, view: str) -> Response:
    """A published view on its own path: its tools only; anonymous when the view says so."""
    parts = kiln_of(request)
    snapshot = await parts.snapshots.fresh()
    views = parts.views.views_ready(snapshot.version)
    if views is None:
        views = await asyncio.to_thread(parts.views.views_at, snapshot.version)
    found = views.get(view)
    if found is None or not found.published:  # unpublished looks like absent: no leak
        return refusal(404, "Not found: no MCP endpoint at this path")
    path = f"/mcp/v/{view}"
    principal: Principal | None = None
    if request.headers.get("authorization"):
        try:
            who = await parts.access.require(request, "call", path)
        except AuthError as error:
            return auth_refusal(error)
        principal = None if who.kind == "anonymous" else who
    elif not found.anonymous:  # the view's setting, whatever KILN_PUBLIC_ANONYMOUS says
        challenge = parts.access.authenticator.challenge(
            need="call", resource_path=path, base_url=parts.access.base_url(request)
        )
        message = "this view needs a bearer credential (an API key or OAuth token)"
        return auth_refusal(AuthError(401, challenge, message))
    bound = bound_view(principal, views)
    if bound is not None and bound != view:
        return refusal(
            403, f"Forbidden: this credential is bound to view {bound!r}; use /mcp/v/{bound}"
        )
    return await answer_mcp(request, principal, view=view)


def refusal(status: int, message: str) -> Response:
    wire = {"jsonrpc": "2.0", "id": None, "error": {"code": INVALID_REQUEST, "message": message}}
    return Response(json.dumps(wire), status_code=status, media_type="application/json")
