"""Middleware every route shares: the DNS-rebinding guard and CORS for allowed origins."""

from __future__ import annotations

from typing import Any

from starlette.applications import Starlette
from starlette.middleware.cors import CORSMiddleware
from starlette.middleware.gzip import GZipMiddleware, GZipResponder
from starlette.responses import JSONResponse

from kiln.api.settings import ApiSettings
from kiln.aws.clients import CALLER_ROLE
from kiln.protocol.cards import is_public_document
from kiln.protocol.errors import jsonrpc_error
from kiln.protocol.guard import refusal
from kiln.protocol.spec import INVALID_REQUEST
from kiln.runner.afterwards import answering

GZIP_MINIMUM_BYTES = 1400  # smaller answers are not worth compressing
GZIP_LEVEL = 6
CORS_HEADERS = [
    "Authorization",
    "Content-Type",
    "Accept",
    "If-Match",
    "MCP-Protocol-Version",
    "Mcp-Method",
    "Mcp-Name",
    "Idempotency-Key",  # a keyed call or run (kiln.protocol.idempotency)
]


class RebindingGuard:
    """Refuses a foreign Origin (403) or, on a loopback bind, a foreign Host (421) on every route,
    before any credential is looked at. MCP paths get a JSON-RPC error body, others the API's."""

    def __init__(self, app: Any, *, allowed_origins: tuple[str, ...], loopback_bind: bool) -> None:
        self.app = app
        self.allowed_origins = allowed_origins
        self.loopback_bind = loopback_bind

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
            # Server cards are public metadata any origin may read; Host is still checked
            public = is_public_document(scope["path"])
            refused = refusal(
                headers.get("host"),
                None if public else headers.get("origin"),
                allowed=self.allowed_origins,
                loopback_bind=self.loopback_bind,
            )
            if refused is not None:
                status, message = refused
                if is_mcp_path(scope["path"]):
                    body: dict[str, Any] = jsonrpc_error(INVALID_REQUEST, message)
                else:
                    code = "forbidden_origin" if status == 403 else "misdirected_request"
                    body = {"error": {"code": code, "message": message}}
                await JSONResponse(body, status_code=status)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def gzip_responder(app: Any) -> GZipResponder:
    """What the GZip middleware does for a client that accepts gzip, around `app` alone."""
    return GZipResponder(app, GZIP_MINIMUM_BYTES, compresslevel=GZIP_LEVEL)


def is_mcp_path(path: str) -> bool:
    """/mcp, /admin/mcp, a view's /mcp/v/<name> and the paths below them: JSON-RPC answers."""
    return path in ("/mcp", "/admin/mcp") or path.startswith(("/mcp/", "/admin/mcp/"))


class Cors(CORSMiddleware):
    """CORS for the allowed origins; server cards answer their own (any origin may read them,
    `kiln.api.cards`)."""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and is_public_document(scope["path"]):
            await self.app(scope, receive, send)
            return
        await super().__call__(scope, receive, send)


class CallerRole:
    """Says which function of a deployed stack serves this path (`kiln.aws.clients.CALLER_ROLE`):
    the public one for /mcp and its metadata, the admin one for everything else."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        path = scope.get("path", "")
        public = path == "/mcp" or path.startswith(("/mcp/", "/.well-known/"))
        token = CALLER_ROLE.set("mcp" if public else "admin")
        try:
            await self.app(scope, receive, send)
        finally:
            CALLER_ROLE.reset(token)


def install(app: Starlette, settings: ApiSettings) -> None:
    # Browsers on an allowed origin may call the API (preflights answered); the guard, added
    # last and so run first, has already refused every other origin.
    app.add_middleware(
        Cors,
        allow_origins=list(settings.allowed_origins),
        allow_methods=["GET", "POST", "PUT", "DELETE"],
        allow_headers=CORS_HEADERS,
        expose_headers=["ETag", "Location", "WWW-Authenticate"],
    )
    app.add_middleware(CallerRole)
    # For clients that accept it: a tools/list of 100 tools is ~70 KB of JSON, paid as egress
    # per response. Event streams are left as they are (starlette excludes them).
    app.add_middleware(GZipMiddleware, minimum_size=GZIP_MINIMUM_BYTES, compresslevel=GZIP_LEVEL)
    app.add_middleware(
        RebindingGuard,
        allowed_origins=settings.allowed_origins,
        loopback_bind=settings.loopback_bind,
    )


class AfterAnswer:
    """ASGI middleware: work a request leaves with `later` (kiln.runner.afterwards) starts
    after its response has been sent."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        with answering():
            await self.app(scope, receive, send)
