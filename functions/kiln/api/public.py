"""The public function's app: the MCP routes and the OAuth metadata documents, bare Starlette.

The public function answers nothing else, so its cold start need not import FastAPI, its
OpenAPI models or the REST routers (`kiln.app` composes those for the admin function and
`kiln dev`). Same middleware as the full app; refusals are answered from the one error table
(`kiln.api.errors`), loaded only when something is refused.
"""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from kiln.api import middleware
from kiln.api.lifespan import closing
from kiln.api.requests import kiln_of, serve_mcp, serve_view
from kiln.stack import Kiln

# As kiln.api.mcp: every method reaches the protocol layer, which answers all but POST.
METHODS = ["GET", "POST", "DELETE", "PUT", "PATCH", "OPTIONS", "TRACE"]


async def public_mcp(request: Request) -> Response:
    return await serve_mcp(request, "call", "/mcp")


async def view_mcp(request: Request) -> Response:
    return await serve_view(request, str(request.path_params["view"]))


async def below_mcp(request: Request) -> Response:
    """Paths below an MCP endpoint: a JSON-RPC 404 (not a redirect to the endpoint)."""
    raise HTTPException(404)


async def protected_resource(request: Request) -> Response:
    return kiln_of(request).access.metadata_response(request)


async def refused(request: Request, error: Exception) -> Response:
    from kiln.api.errors import answer

    return await answer(request, error)


def create_public_app(parts: Kiln) -> Starlette:
    app = Starlette(
        routes=[
            Route("/mcp", public_mcp, methods=METHODS),
            Route("/mcp/v/{view}", view_mcp, methods=METHODS),
            Route("/mcp/{rest:path}", below_mcp, methods=METHODS),
            Route("/.well-known/oauth-protected-resource", protected_resource),
            Route("/.well-known/oauth-protected-resource/{resource:path}", protected_resource),
        ],
        exception_handlers={HTTPException: refused, Exception: refused},
        lifespan=closing(parts),
    )
    app.router.redirect_slashes = False  # as the full app: `/mcp/` is a JSON-RPC 404, no redirect
    app.state.kiln = parts
    middleware.install(app, parts.settings)
    return app
