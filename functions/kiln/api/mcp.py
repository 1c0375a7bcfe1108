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
from starlette.responses import Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from kiln.api.mcp_serving import serve_mcp, serve_view
from kiln.api.middleware import GZIP_MINIMUM_BYTES, gzip_responder
from kiln.aws.clients import CALLER_ROLE
from kiln.protocol.guard import host_allowed

log = logging.getLogger("kiln.api.mcp")

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


class McpShortcut:
    """A plain `POST /mcp` goes straight to its handler, past the middleware and router that
    have nothing to do for it (profiled: on `kiln dev` they cost about as much as the MCP
    endpoint itself, for a tools/list page already rendered).

    Plain means that none of them would act: no Origin (CORS, and the rebinding guard's
    Origin check) and a Host the guard accepts (a refused one goes on to the guard). A client
    that accepts gzip (most do: httpx and Node's fetch ask for it by default) is plain too:
    its answer goes through Starlette's own gzip responder, with the app's settings, which
    leaves one under the minimum size, or an event stream, as it is. The handler is the
    route's own: the caller role is set as `CallerRole` sets it, errors are answered by the
    same table (`kiln.api.errors`), and the app's outermost middleware (server errors) still
    wraps it. Installed last, so it runs first of the app's own middleware
    (`kiln.api.apps`)."""

    def __init__(self, app: Any, *, loopback_bind: bool) -> None:
        self.app = app
        self.loopback_bind = loopback_bind

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        plain = (scope["type"] == "http" and scope["path"] == "/mcp" and scope["method"] == "POST"
                 and self._plain(scope["headers"]))  # fmt: skip
        if not plain:
            await self.app(scope, receive, send)
            return
        request = Request(scope, receive)
        token = CALLER_ROLE.set("mcp")
        try:
            try:
                response = await public_mcp(request)
            except Exception as error:
                from kiln.api.errors import answer

                response = await answer(request, error)
                if response.status_code >= 500:  # its traceback to the log, as the stack does
                    log.error("unhandled error answering POST /mcp", exc_info=error)
            if plain == "gzip":
                _vary(response, compressible=False)  # the responder names Accept-Encoding
                await gzip_responder(response)(scope, receive, send)
            else:
                _vary(response, compressible=_compressible(response))
                await response(scope, receive, send)
        finally:
            CALLER_ROLE.reset(token)

    def _plain(self, headers: list[tuple[bytes, bytes]]) -> Literal["gzip", "identity", ""]:
        """How a request nothing but the route would act on is answered; "" for the rest."""
        host: str | None = None
        coding: Literal["gzip", "identity"] | None = None
        for name, value in headers:
            if name == b"origin":
                return ""
            if name == b"accept-encoding" and coding is None:  # the first, as GZip reads it
                coding = "gzip" if b"gzip" in value else "identity"
            elif name == b"host":  # the last, as the guard reads it
                host = value.decode("latin-1")
        if not host_allowed(host, loopback_bind=self.loopback_bind):
            return ""
        return coding or "identity"


def _compressible(response: Response) -> bool:
    return not isinstance(response, StreamingResponse) and len(response.body) >= GZIP_MINIMUM_BYTES


def _vary(response: Response, *, compressible: bool) -> None:
    """The Vary header the skipped middleware would have set: CORS names Origin; GZip names
    Accept-Encoding on an answer it could have compressed."""
    if any(name == b"vary" for name, _ in response.raw_headers):
        names = [*response.headers.getlist("vary"), "Origin"]
        response.headers["vary"] = ", ".join([*names, *(["Accept-Encoding"] * compressible)])
        return
    response.raw_headers.append(
        (b"vary", b"Origin, Accept-Encoding" if compressible else b"Origin")
    )  # the usual case, without MutableHeaders' parsing
