"""MCP over Streamable HTTP (POST in, JSON out), as plain data: no web framework here.

The app turns its request into an `HttpRequest` (header names lower-cased), awaits
`McpEndpoint.handle`, and sends back the `HttpResponse`. Checks run in the digest's order
(§5.4): method, Host (loopback binds), Origin, size, media type, then the JSON-RPC layer.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field

from kiln.protocol.backend import CallContext, TaskBackend, ToolBackend
from kiln.protocol.dispatch import Dispatcher, Reply, error_reply
from kiln.protocol.errors import TransportError
from kiln.protocol.guard import refusal
from kiln.protocol.settings import ProtocolSettings

_JSON = "application/json"


@dataclass(frozen=True)
class HttpRequest:
    method: str
    headers: Mapping[str, str]  # names lower-cased
    body: bytes = b""


@dataclass(frozen=True)
class HttpResponse:
    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    stream: AsyncIterator[bytes] | None = None  # text/event-stream frames, sent as they come


class McpEndpoint:
    """One MCP endpoint: both protocol eras, decided per request."""

    def __init__(
        self,
        backend: ToolBackend,
        settings: ProtocolSettings | None = None,
        *,
        tasks: TaskBackend | None = None,
    ) -> None:
        self.settings = settings or ProtocolSettings()
        self.dispatcher = Dispatcher(backend, self.settings, tasks)

    async def handle(self, request: HttpRequest, ctx: CallContext) -> HttpResponse:
        try:
            self._check_transport(request)
        except TransportError as error:
            return self._response(error_reply(error))
        reply = await self.dispatcher.handle_body(request.body, request.headers, ctx)
        return self._response(reply)

    @staticmethod
    def _response(reply: Reply) -> HttpResponse:
        headers = dict(reply.headers)
        if reply.stream is not None:
            headers["content-type"] = "text/event-stream"
            headers["cache-control"] = "no-cache"
            return HttpResponse(reply.status, headers, b"", stream=reply.stream)
        if reply.body is None:
            return HttpResponse(reply.status, headers, b"")
        headers["content-type"] = _JSON
        return HttpResponse(reply.status, headers, reply.body)

    def _check_transport(self, request: HttpRequest) -> None:
        settings = self.settings
        if request.method.upper() != "POST":
            raise TransportError(
                f"Method not allowed: {request.method.upper()}; this endpoint takes POST only "
                "(no SSE stream, no sessions)",
                status=405,
                headers={"allow": "POST"},
            )
        refused = (
            refusal(
                request.headers.get("host"),
                request.headers.get("origin"),
                allowed=settings.allowed_origins,
                loopback_bind=settings.loopback_bind,
            )
            if settings.check_origin
            else None
        )
        if refused is not None:
            raise TransportError(refused[1], status=refused[0])
        if len(request.body) > settings.max_body_bytes:
            raise TransportError(
                f"Payload too large: the body is {len(request.body)} bytes, "
                f"the limit is {settings.max_body_bytes}",
                status=413,
            )
        media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if media_type != _JSON:
            raise TransportError(f"Unsupported media type: send Content-Type: {_JSON}", status=415)
