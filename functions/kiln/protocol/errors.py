"""Protocol errors: each carries its JSON-RPC code, its HTTP statuses and its data.

Every problem the protocol layer detects is raised as one of the exceptions below, each a
`kiln.errors.KilnError` (the SDK's `MCPError` is the model: an error is its code, message and
data). A class says its `code` and the HTTP status it is answered with on each era (digest
§2.4, §2.5, §5.4); a subclass answers as its parent until it says otherwise. Every
`KilnError` that ends an MCP request, a domain refusal before the protocol layer saw it
included, is answered once, by `error_answer` (status, JSON-RPC body, headers). Tool-level
problems (bad arguments, a failed run) are not exceptions: they are `isError` results built
in `calling.py`.
"""

from __future__ import annotations

from typing import Any, ClassVar

# Kiln's own codes and the id type live in kiln.errors; importable from here as before.
from kiln.errors import RATE_LIMITED as RATE_LIMITED
from kiln.errors import REFUSED as REFUSED
from kiln.errors import UNAUTHORIZED as UNAUTHORIZED
from kiln.errors import UNAVAILABLE as UNAVAILABLE
from kiln.errors import KilnError
from kiln.errors import RequestId as RequestId
from kiln.protocol.spec import (
    HEADER_MISMATCH,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    PARSE_ERROR,
    UNSUPPORTED_PROTOCOL_VERSION,
    URL_ELICITATION_REQUIRED,
)

_SHOWN_CHARS = 64


def clip(value: str, limit: int = _SHOWN_CHARS) -> str:
    """A caller-sent string for a message: enough to identify it, never all of it."""
    return value if len(value) <= limit else value[:limit] + "…"


def shown(value: str, limit: int = _SHOWN_CHARS) -> str:
    """`clip`, quoted."""
    return repr(clip(value, limit))


class ProtocolError(KilnError):
    """Base: a request the protocol layer refuses. `request_id` is echoed when known.

    Its HTTP status follows the era the request was answered on (`modern`), unless an
    instance is given its own (a transport refusal). REST never answers one (`rest_code`)."""

    code: int = INTERNAL_ERROR  # the JSON-RPC code (an instance may carry its own: a replay)
    rest_code = None
    legacy_status: ClassVar[int] = 200  # HTTP status on the 2025 era (or an unknown one)
    modern_status: ClassVar[int] = 200  # HTTP status when the request claimed 2026-07-28
    _status: int | None = None

    def __init__(
        self,
        message: str,
        *,
        request_id: RequestId = None,
        data: Any = None,
        modern: bool = False,
    ) -> None:
        super().__init__(message, data=data)
        self.request_id = request_id
        self.modern = modern  # raised on the 2026-07-28 path (decides the HTTP status)

    @property
    def status(self) -> int:
        if self._status is not None:
            return self._status
        return self.modern_status if self.modern else self.legacy_status

    @status.setter
    def status(self, value: int) -> None:
        self._status = value


class ParseError(ProtocolError):
    """The body is not JSON."""

    code, legacy_status, modern_status = PARSE_ERROR, 400, 400


class InvalidRequestError(ProtocolError):
    """The body is JSON but not an acceptable JSON-RPC message (shape, batch rules)."""

    code, legacy_status, modern_status = INVALID_REQUEST, 400, 400


class TransportError(ProtocolError):
    """An HTTP-level refusal (method, Origin, Host, media type, size). Carries its own status."""

    code = INVALID_REQUEST

    def __init__(self, message: str, *, status: int, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self._headers = headers or {}

    def headers(self) -> dict[str, str]:
        return self._headers


class MissingMetaError(ProtocolError):
    """A modern request without the required `params._meta` keys."""

    code, legacy_status, modern_status = INVALID_PARAMS, 400, 400


class HeaderMismatchError(ProtocolError):
    """A modern request whose MCP headers are missing or disagree with the body."""

    code, legacy_status, modern_status = HEADER_MISMATCH, 400, 400


class UnsupportedVersionError(ProtocolError):
    """A protocol version this server does not speak (modern `_meta` or a legacy header)."""

    code, legacy_status, modern_status = UNSUPPORTED_PROTOCOL_VERSION, 400, 400


class MethodNotFoundError(ProtocolError):
    """A method this server does not serve in the request's era."""

    code, legacy_status, modern_status = METHOD_NOT_FOUND, 200, 404


class InvalidParamsError(ProtocolError):
    """Params the method cannot use: unknown tool, bad cursor, wrong types."""

    code = INVALID_PARAMS


class MissingCapabilityError(ProtocolError):
    """A request the server can serve only with a client capability the client did not send."""

    code, legacy_status, modern_status = MISSING_REQUIRED_CLIENT_CAPABILITY, 400, 400


class UrlElicitationRequiredError(ProtocolError):
    """A 2025-11-25 call that can go on only after the person opens a page (URL mode);
    `data.elicitations` lists them. Never on 2026-07-28 (an input request there)."""

    code = URL_ELICITATION_REQUIRED


class InternalError(ProtocolError):
    """Something failed inside Kiln; the message never carries internals."""


class UnavailableError(ProtocolError):
    """What the request needs (the tool catalog) cannot answer now; retrying later may work.

    Raised by a backend; the protocol layer passes it on with the request's id."""

    code = UNAVAILABLE

    def for_request(self, request_id: RequestId, *, modern: bool = False) -> UnavailableError:
        return UnavailableError(self.message, request_id=request_id, data=self.data, modern=modern)


def error_data(code: int, message: str, data: Any = None) -> dict[str, Any]:
    """A JSON-RPC error object: `{"code", "message"}`, and `data` when there is some."""
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return error


def jsonrpc_error(
    code: int, message: str, *, request_id: RequestId = None, data: Any = None
) -> dict[str, Any]:
    """The one JSON-RPC error body: every error answer Kiln writes, on every transport."""
    return {"jsonrpc": "2.0", "id": request_id, "error": error_data(code, message, data)}


class RateLimitedError(ProtocolError):
    """A call refused by a quota: HTTP 429 with Retry-After; inside a batch, just the error.

    `data` says which quota, its limit and when it resets."""

    code, legacy_status, modern_status = RATE_LIMITED, 429, 429

    def __init__(self, message: str, *, retry_after_s: int, data: Any = None) -> None:
        super().__init__(message, data=data)
        self.retry_after_s = retry_after_s

    def headers(self) -> dict[str, str]:
        return {"retry-after": str(self.retry_after_s)}


def error_object(error: KilnError) -> dict[str, Any]:
    """The JSON-RPC error response for `error` (`id` null when the request id is unknown)."""
    return jsonrpc_error(
        error.code, error.rpc_message, request_id=error.request_id, data=error.data
    )


def error_answer(error: KilnError) -> tuple[int, dict[str, Any], dict[str, str]]:
    """The MCP edge's one translation of a refusal: HTTP status, JSON-RPC body, headers."""
    return error.status, error_object(error), error.headers()
