"""The MCP routes: /mcp (callers) and /admin/mcp (authors), over `kiln.protocol`.

The route authenticates, reads the capped body and hands (method, headers, body) to the
transport-agnostic endpoint; everything MCP happens there.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from kiln.api.common import kiln_of, read_capped, time_left_s
from kiln.api.errors import jsonrpc_response
from kiln.auth.policy import AuthError, Permission
from kiln.protocol.backend import CallContext

METHODS = ["GET", "POST", "DELETE", "PUT", "PATCH", "OPTIONS"]
public_router = APIRouter(include_in_schema=False)
admin_router = APIRouter(include_in_schema=False)


async def _serve(request: Request, need: Permission, path: str) -> Response:
    from kiln.protocol import HttpRequest

    parts = kiln_of(request)
    try:
        principal = await parts.access.require(request, need, path)
    except AuthError as error:
        return jsonrpc_response(error)
    body = await read_capped(request, parts.settings.max_body_bytes)
    headers = {name.lower(): value for name, value in request.headers.items()}
    ctx = CallContext(
        time_left_s=time_left_s(request),
        principal=None if principal.kind == "anonymous" else principal,
    )
    endpoint = parts.admin_endpoint if need == "author" else parts.endpoint
    answer = await endpoint.handle(HttpRequest(request.method, headers, body), ctx)
    return Response(answer.body, status_code=answer.status, headers=answer.headers)


@public_router.api_route("/mcp", methods=METHODS)
async def public_mcp(request: Request) -> Response:
    return await _serve(request, "call", "/mcp")


@admin_router.api_route("/admin/mcp", methods=METHODS)
async def admin_mcp(request: Request) -> Response:
    return await _serve(request, "author", "/admin/mcp")
