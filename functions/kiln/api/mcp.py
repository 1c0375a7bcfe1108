"""The MCP routes, one list for both apps: /mcp (callers), /mcp/v/{view} (a published
view), /admin/mcp (authors), and the OAuth protected-resource metadata documents.

Each route authenticates, reads the capped body and hands (method, headers, body) to the
transport-agnostic endpoint (`kiln.api.mcp_serving`); everything MCP happens in `kiln.protocol`.
Bare Starlette routes: the public function's app imports no FastAPI.
"""

from __future__ import annotations

import logging
from typing import Any, Literal

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from kiln.api.mcp_serving import serve_mcp, serve_view

log = logging.getLogger("kiln.api.mcp")

# Every method reaches the protocol layer, which answers all but POST with a JSON-RPC 405;
# methods outside this list get the same answer from the app's routing error handler.
METHODS = ["GET", "POST", "DELETE", "PUT", "PATCH", "OPTIONS", "TRACE"]
_SERVED = frozenset(METHODS)

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
        from kiln.api import cards

        found += cards.routes()  # before /mcp/{rest:path}: the server cards and their catalog
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


class AheadOfRouter:
    """The MCP endpoints' own paths (`/mcp`, `/admin/mcp`), served ahead of the router and its
    exception middleware: the app's innermost middleware, so every other one (the rebinding
    guard, gzip, the caller role, CORS: `kiln.api.middleware`) wraps these requests exactly as
    it wraps the rest, and this does nothing they do.

    The handler is the route's own (`routes` keeps the route, for the methods outside METHODS
    the router refuses), and an error it raises is answered by `kiln.api.errors.answer`, as
    the app's exception handlers answer it. Profiled under wrk,
    the router and the exception middleware cost about as much as the MCP endpoint itself
    for a tools/list page already rendered."""

    def __init__(self, app: Any, *, serves: Serves) -> None:
        self.app = app
        self.handlers = {  # the routes' own handlers, as `routes` maps them
            route.path: route.endpoint
            for route in routes(serves)
            if isinstance(route, Route) and route.path in ("/mcp", "/admin/mcp")
        }

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        handler = self.handlers.get(scope["path"]) if scope["type"] == "http" else None
        if handler is None or scope["method"] not in _SERVED:
            await self.app(scope, receive, send)
            return
        request = Request(scope, receive)
        try:
            response = await handler(request)
        except Exception as error:
            from kiln.api.errors import answer

            response = await answer(request, error)
            if response.status_code >= 500:  # its traceback to the log, as the stack does
                log.error("unhandled error answering %s %s", scope["method"], scope["path"],
                          exc_info=error)  # fmt: skip
        await response(scope, receive, send)
