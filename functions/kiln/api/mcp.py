"""The MCP routes: /mcp (callers) and /admin/mcp (authors), over `kiln.protocol`.

The route authenticates, reads the capped body and hands (method, headers, body) to the
transport-agnostic endpoint; everything MCP happens there.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from kiln.api.requests import serve_mcp

METHODS = ["GET", "POST", "DELETE", "PUT", "PATCH", "OPTIONS"]
public_router = APIRouter(include_in_schema=False)
admin_router = APIRouter(include_in_schema=False)


@public_router.api_route("/mcp", methods=METHODS)
async def public_mcp(request: Request) -> Response:
    return await serve_mcp(request, "call", "/mcp")


@admin_router.api_route("/admin/mcp", methods=METHODS)
async def admin_mcp(request: Request) -> Response:
    return await serve_mcp(request, "author", "/admin/mcp")
