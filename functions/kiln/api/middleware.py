"""Middleware every route shares: the DNS-rebinding guard and CORS for allowed origins."""

from __future__ import annotations

from typing import Any

from starlette.applications import Starlette
from starlette.middleware.cors import CORSMiddleware
from starlette.responses import JSONResponse

from kiln.protocol.errors import jsonrpc_error
from kiln.protocol.guard import refusal
from kiln.protocol.spec import INVALID_REQUEST
from kiln.settings import Settings

CORS_HEADERS = [
    "Authorization",
    "Content-Type",
    "Accept",
    "If-Match",
    "MCP-Protocol-Version",
    "Mcp-Method",
    "Mcp-Name",
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
            refused = refusal(
                headers.get("host"),
                headers.get("origin"),
                allowed=self.allowed_origins,
                loopback_bind=self.loopback_bind,
            )
            if refused is not None:
                status, message = refused
                if scope["path"].endswith("/mcp"):
                    body: dict[str, Any] = jsonrpc_error(INVALID_REQUEST, message)
                else:
                    code = "forbidden_origin" if status == 403 else "misdirected_request"
                    body = {"error": {"code": code, "message": message}}
                await JSONResponse(body, status_code=status)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def install(app: Starlette, settings: Settings) -> None:
    # Browsers on an allowed origin may call the API (preflights answered); the guard, added
    # last and so run first, has already refused every other origin.
    app.add_middleware(
        CORSMiddleware,
        allow_origins=list(settings.allowed_origins),
        allow_methods=["GET", "POST", "PUT", "DELETE"],
        allow_headers=CORS_HEADERS,
        expose_headers=["ETag", "Location", "WWW-Authenticate"],
    )
    app.add_middleware(
        RebindingGuard,
        allowed_origins=settings.allowed_origins,
        loopback_bind=settings.loopback_bind,
    )
