"""Middleware every route shares: the DNS-rebinding guard and CORS for allowed origins."""

from __future__ import annotations

from typing import Any

from starlette.applications import Starlette
from starlette.middleware.cors import CORSMiddleware
from starlette.middleware.gzip import GZipMiddleware
from starlette.responses import JSONResponse

from kiln.api.settings import ApiSettings
from kiln.aws.clients import CALLER_ROLE
from kiln.protocol.card_paths import is_public_document
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
    before any credential is looked at. MCP paths get a JSON-RPC error body, others the API's.
    The one place the Host is checked on a running app; a request it accepts is handed on at
    once."""

    def __init__(self, app: Any, *, allowed_origins: tuple[str, ...], loopback_bind: bool) -> None:
        self.app = app
        self.allowed_origins = allowed_origins
        self.loopback_bind = loopback_bind

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        host = origin = None
        for name, value in scope["headers"]:  # the last of each, as a dict of them would hold
            if name == b"host":
                host = value.decode("latin-1")
            elif name == b"origin":
                origin = value.decode("latin-1")
        if is_public_document(scope["path"]):  # server cards: any origin may read them
            origin = None  # (Host is still checked)
        refused = refusal(
            host, origin, allowed=self.allowed_origins, loopback_bind=self.loopback_bind
        )
        if refused is None:
            await self.app(scope, receive, send)
            return
        status, message = refused
        if is_mcp_path(scope["path"]):
            body: dict[str, Any] = jsonrpc_error(INVALID_REQUEST, message)
        else:
            code = "forbidden_origin" if status == 403 else "misdirected_request"
            body = {"error": {"code": code, "message": message}}
        await JSONResponse(body, status_code=status)(scope, receive, send)


class Cors(CORSMiddleware):
    """Starlette's CORS, handing a request without Origin (not a browser's) on at once: it only
    names Origin in the answer's Vary, as Starlette's own does then. Server cards answer their
    own CORS (any origin may read them, `kiln.api.cards`)."""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or is_public_document(scope["path"]):
            await self.app(scope, receive, send)
            return
        if any(name == b"origin" for name, _ in scope["headers"]):
            await super().__call__(scope, receive, send)
            return

        async def vary_origin(message: Any) -> None:
            if message["type"] == "http.response.start":
                add_vary(message, b"Origin")
            await send(message)

        await self.app(scope, receive, vary_origin)


class Gzip(GZipMiddleware):
    """Starlette's GZip for a client that accepts gzip. Any other client's answer is handed on
    at once, as it is, naming Accept-Encoding in its Vary when Starlette's would compress it
    for a client that asked (not an event stream, an image, a partial or an encoded answer).
    Starlette's identity responder holds the answer back to name it only on a body of 1,400
    bytes or more; naming it on a small one too tells a cache nothing false."""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or _accepts_gzip(scope["headers"]):
            await super().__call__(scope, receive, send)
            return

        async def vary_encoding(message: Any) -> None:
            if message["type"] == "http.response.start" and self._compressible(message):
                add_vary(message, b"Accept-Encoding")
            await send(message)

        await self.app(scope, receive, vary_encoding)

    def _compressible(self, message: Any) -> bool:
        if message.get("status") == 206:
            return False
        for name, value in message.get("headers", ()):
            lower = name.lower()
            if lower == b"content-encoding":
                return False
            if lower == b"content-type":
                media = value.decode("latin-1").partition(";")[0].strip().lower()
                kind = media.partition("/")[0] + "/*"
                if media in self.exclude_content_types or kind in self.exclude_content_types:
                    return False
        return True


def _accepts_gzip(headers: list[tuple[bytes, bytes]]) -> bool:
    for name, value in headers:  # the first, as Starlette's Headers.get reads it
        if name == b"accept-encoding":
            return b"gzip" in value
    return False


def add_vary(message: Any, name: bytes) -> None:
    """Name `name` in a response start message's Vary (several Vary headers read as one
    joined by commas, so the first one takes it)."""
    headers = message.get("headers")
    if not isinstance(headers, list):
        message["headers"] = headers = list(headers or ())
    for index, (key, value) in enumerate(headers):
        if key.lower() == b"vary":
            headers[index] = (key, value + b", " + name)
            return
    headers.append((b"vary", name))


def is_mcp_path(path: str) -> bool:
    """/mcp, /admin/mcp, a view's /mcp/v/<name> and the paths below them: JSON-RPC answers."""
    return path in ("/mcp", "/admin/mcp") or path.startswith(("/mcp/", "/admin/mcp/"))


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
    app.add_middleware(Gzip, minimum_size=GZIP_MINIMUM_BYTES, compresslevel=GZIP_LEVEL)
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
