"""The public function's app: /mcp and the OAuth metadata documents, on bare Starlette.

The public function answers nothing else, so its cold start need not import FastAPI, its
OpenAPI models or the REST routers (`kiln.app` composes those for the admin function and
`kiln dev`). Same middleware as the full app; a refusal that escapes the route is answered
from the one error table (`kiln.api.errors`), loaded only then.
"""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from kiln.api import middleware
from kiln.api.requests import kiln_of, serve_mcp
from kiln.stack import Kiln

METHODS = ["GET", "POST", "DELETE", "PUT", "PATCH", "OPTIONS"]


async def public_mcp(request: Request) -> Response:
    return await serve_mcp(request, "call", "/mcp")


async def protected_resource(request: Request) -> Response:
    return kiln_of(request).access.metadata_response(request)


async def refusal(request: Request, error: Exception) -> Response:
    from kiln.api.errors import jsonrpc_response

    return jsonrpc_response(error)


def create_public_app(parts: Kiln) -> Starlette:
    app = Starlette(
        routes=[
            Route("/mcp", public_mcp, methods=METHODS),
            Route("/.well-known/oauth-protected-resource", protected_resource),
            Route("/.well-known/oauth-protected-resource/{resource:path}", protected_resource),
        ],
        exception_handlers={Exception: refusal},
    )
    app.state.kiln = parts
    middleware.install(app, parts.settings)
    return app
