"""The MCP routes, one list for both apps: /mcp (callers), /mcp/v/{view} (a published
view), /admin/mcp (authors), and the OAuth protected-resource metadata documents.

Each route authenticates, reads the capped body and hands (method, headers, body) to the
transport-agnostic endpoint (`kiln.api.requests`); everything MCP happens in `kiln.protocol`.
Bare Starlette routes: the public function's app imports no FastAPI.
"""

from __future__ import annotations

from typing import Literal

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from kiln.api.requests import serve_mcp, serve_view

# Every method reaches the protocol layer, which answers all but POST with a JSON-RPC 405;
# methods outside this list get the same answer from the app's routing error handler.
METHODS = ["GET", "POST", "DELETE", "PUT", "PATCH", "OPTIONS", "TRACE"]

Serves = Literal["public", "admin", "all"]


async def public_mcp(request: Request) -> Response:
    return await serve_mcp(request, "call", "/mcp")


async def admin_mcp(request: Request) -> Response:
    return await serve_mcp(request, "author", "/admin/mcp")


async def view_mcp(request: Request) -> Response:
    return await serve_view(request, str(request.path_params["view"]))


async def below_mcp(request: Request) -> Response:
    """Paths below an MCP endpoint: a JSON-RPC 404 (not a redirect to the endpoint)."""
    raise HTTPException(404)


async def protected_resource(request: Request) -> Response:
    from kiln.api.auth import metadata_response

    return metadata_response(request)


def routes(serves: Serves) -> list[BaseRoute]:
    """The MCP and metadata routes of an app that serves callers, authors or both."""
    found: list[BaseRoute] = [
        Route("/.well-known/oauth-protected-resource", protected_resource),
        Route("/.well-known/oauth-protected-resource/{resource:path}", protected_resource),
    ]
    if serves in ("all", "public"):
        found += [
            Route("/mcp", public_mcp, methods=METHODS),
            Route("/mcp/v/{view}", view_mcp, methods=METHODS),
            Route("/mcp/{rest:path}", below_mcp, methods=METHODS),
        ]
    if serves in ("all", "admin"):
        found += [
            Route("/admin/mcp", admin_mcp, methods=METHODS),
            Route("/admin/mcp/{rest:path}", below_mcp, methods=METHODS),
        ]
    return found
