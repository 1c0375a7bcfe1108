"""The MCP routes' work, on Starlette alone (no FastAPI import): authenticate, read the capped
body, hand (method, headers, body) to the transport-agnostic endpoint.

The public function's app (`kiln.api.apps.create_public_app`) is bare Starlette so that a cold
start does not import FastAPI and the REST API; both apps mount the same routes (`kiln.api.mcp`).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from kiln.access.views import View
from kiln.accounting.account import CallBook
from kiln.accounting.gate import bound_view
from kiln.api.auth import base_url, require
from kiln.identity.policy import AuthError, Permission, Principal
from kiln.protocol.backend import Arrival, CallContext, Seen
from kiln.protocol.errors import jsonrpc_error
from kiln.protocol.spec import INVALID_REQUEST

if TYPE_CHECKING:
    from kiln.stack import Kiln


def kiln_of(request: Request) -> Kiln:
    """The Kiln the app was composed over (`kiln.api.apps.create_app` puts it on app.state)."""
    kiln: Kiln = request.app.state.kiln
    return kiln


def time_left_s(request: Request) -> float:
    """Seconds left to answer: from the Lambda context when Mangum gives one, else a budget."""
    context = request.scope.get("aws.context")
    if context is not None and hasattr(context, "get_remaining_time_in_millis"):
        return float(context.get_remaining_time_in_millis()) / 1000.0
    return kiln_of(request).api_settings.local_time_budget_s


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
    # The edge's error answers, loaded only when a request is refused.
    from kiln.api.errors import jsonrpc_response

    return jsonrpc_response(error)


async def serve_mcp(request: Request, need: Permission, path: str) -> Response:
    try:
        principal = await require(request, need, path)
    except AuthError as error:
        return auth_refusal(error)
    who = None if principal.kind == "anonymous" else principal
    return await answer_mcp(request, who, admin=need == "author")


async def answer_mcp(
    request: Request, principal: Principal | None, *, admin: bool = False, view: View | None = None
) -> Response:
    """Hand the request to the MCP endpoint; ledger writes and quota refunds it leaves are
    done before the answer is sent (on `kiln dev` as in Lambda: nothing answered is lost)."""
    from kiln.protocol import HttpRequest

    kiln = kiln_of(request)
    body = await read_capped(request, kiln.api_settings.max_body_bytes)
    headers = {name.lower(): value for name, value in request.headers.items()}
    book = CallBook()
    client, server = request.scope.get("client"), request.scope.get("server")
    peer = None
    if client and server and client[0] in ("127.0.0.1", "::1"):  # a tool's run, perhaps
        peer = (client[1], server[1])
    # Bookkeeping starts at once and the answer waits for it, here as in Lambda: an answered
    # call is always in the ledger, even if the server is killed the moment after.
    arrival = Arrival(
        peer=peer,
        client_address=request.client.host if request.client else None,  # Lambda: sourceIp
        book=book,
        base_url=base_url(request),
    )
    seen = Seen()  # what the protocol finds the request to be, for Lambda's log line
    hear = getattr(request.scope.get("aws.context"), "hear", None)  # kiln.observability
    if callable(hear):
        hear(seen)
    ctx = CallContext(
        seen=seen,
        time_left_s=time_left_s(request),
        principal=principal,
        view=view,
        # a process that keeps running can hold a 2025 call open
        can_hold=request.scope.get("aws.context") is None,
        arrival=arrival,
    )
    endpoint = kiln.admin_endpoint if admin else kiln.endpoint
    answer = await endpoint.handle(HttpRequest(request.method, headers, body), ctx)
    if answer.stream is not None:  # the call runs as the stream goes: its bookkeeping after
        background = BackgroundTask(book.close)
        return StreamingResponse(
            answer.stream, status_code=answer.status, headers=answer.headers, background=background
        )
    await book.close()
    return Response(answer.body, status_code=answer.status, headers=answer.headers)


async def serve_view(request: Request, view: str) -> Response:
    """A published view on its own path: its tools only; anonymous when the view says so."""
    kiln = kiln_of(request)
    snapshot = await kiln.snapshots.fresh()
    views = kiln.views.views_ready(snapshot.version)
    if views is None:
        views = await asyncio.to_thread(kiln.views.views_at, snapshot.version)
    found = views.get(view)
    if found is None or not found.published:  # unpublished looks like absent: no leak
        return refusal(404, "Not found: no MCP endpoint at this path")
    path = f"/mcp/v/{view}"
    principal: Principal | None = None
    if request.headers.get("authorization"):
        try:
            who = await require(request, "call", path)
        except AuthError as error:
            return auth_refusal(error)
        principal = None if who.kind == "anonymous" else who
    elif not found.anonymous:  # the view's setting, whatever KILN_PUBLIC_ANONYMOUS says
        challenge = kiln.callers.authenticator.challenge(
            need="call", resource_path=path, base_url=base_url(request)
        )
        message = "this view needs a bearer credential (an API key or OAuth token)"
        return auth_refusal(AuthError(401, challenge, message))
    bound = bound_view(principal, views)
    if bound is not None and bound != view:
        return refusal(
            403, f"Forbidden: this credential is bound to view {bound!r}; use /mcp/v/{bound}"
        )
    with kiln.snapshots.pinned(snapshot):  # the call reads no second catalog version
        return await answer_mcp(request, principal, view=found)  # read once, here


def refusal(status: int, message: str) -> Response:
    from kiln.api.errors import json_response  # as every other answer is written

    return json_response(jsonrpc_error(INVALID_REQUEST, message), status)
