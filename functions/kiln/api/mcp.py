"""The MCP routes: /mcp (callers), /mcp/v/{view} (a published view) and /admin/mcp
(authors), over `kiln.protocol`.

The route authenticates, reads the capped body and hands (method, headers, body) to the
transport-agnostic endpoint; everything MCP happens there (`kiln.api.requests`, shared with
the public function's bare Starlette app in `kiln.api.public`).
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response
from starlette.exceptions import HTTPException

from kiln.api.requests import serve_mcp, serve_view

# Every method reaches the protocol layer, which answers all but POST with a JSON-RPC 405;
# methods outside this list get the same answer from the app's routing error handler.
METHODS = ["GET", "POST", "DELETE", "PUT", "PATCH", "OPTIONS", "TRACE"]
public_router = APIRouter(include_in_schema=False)
admin_router = APIRouter(include_in_schema=False)


@public_router.api_route("/mcp", methods=METHODS)
async def public_mcp(request: Request) -> Response:
    return await serve_mcp(request, "call", "/mcp")


@admin_router.api_route("/admin/mcp", methods=METHODS)
async def admin_mcp(request: Request) -> Response:
    return await serve_mcp(request, "author", "/admin/mcp")


@public_router.api_route("/mcp/v/{view}", methods=METHODS)
async def view_mcp(view: str, request: Request) -> Response:
    return await serve_view(request, view)


@public_router.api_route("/mcp/{rest:path}", methods=METHODS)
@admin_router.api_route("/admin/mcp/{rest:path}", methods=METHODS)
async def below_mcp(rest: str) -> Response:
    """Paths below an MCP endpoint: a JSON-RPC 404 (not a redirect to the endpoint)."""
    raise HTTPException(404)
