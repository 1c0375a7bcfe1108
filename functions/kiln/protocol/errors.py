"""Protocol errors and the one table that maps them to JSON-RPC codes and HTTP statuses.

Every problem the protocol layer detects is raised as one of the exceptions below and turned
into a JSON-RPC error body by `error_reply`. Tool-level problems (bad arguments, a failed run)
are not exceptions: they are `isError` results built in `calling.py`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kiln.protocol.spec import (
    HEADER_MISMATCH,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    PARSE_ERROR,
    UNSUPPORTED_PROTOCOL_VERSION,
)

RequestId = int | str | None

_SHOWN_CHARS = 64


def clip(value: str, limit: int = _SHOWN_CHARS) -> str:
    """A caller-sent string for a message: enough to identify it, never all of it."""
    return value if len(value) <= limit else value[:limit] + "…"


def shown(value: str, limit: int = _SHOWN_CHARS) -> str:
    """`clip`, quoted."""
    return repr(clip(value, limit))


class ProtocolError(Exception):
    """Base: a request the protocol layer refuses. `request_id` is echoed when known."""

    def __init__(
        self,
        message: str,
        *,
        request_id: RequestId = None,
        data: Any = None,
        modern: bool = False,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.request_id = request_id
        self.data = data
        self.modern = modern  # raised on the 2026-07-28 path (decides the HTTP status)


class ParseError(ProtocolError):
    """The body is not JSON."""


class InvalidRequestError(ProtocolError):
    """The body is JSON but not an acceptable JSON-RPC message (shape, batch rules)."""


class TransportError(ProtocolError):
    """An HTTP-level refusal (method, Origin, Host, media type, size). Carries its own status."""

    def __init__(self, message: str, *, status: int, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.headers = headers or {}


class MissingMetaError(ProtocolError):
    """A modern request without the required `params._meta` keys."""


class HeaderMismatchError(ProtocolError):
    """A modern request whose MCP headers are missing or disagree with the body."""


class UnsupportedVersionError(ProtocolError):
    """A protocol version this server does not speak (modern `_meta` or a legacy header)."""


class MethodNotFoundError(ProtocolError):
    """A method this server does not serve in the request's era."""


class InvalidParamsError(ProtocolError):
    """Params the method cannot use: unknown tool, bad cursor, wrong types."""


class MissingCapabilityError(ProtocolError):
    """A request the server can serve only with a client capability the client did not send."""


class InternalError(ProtocolError):
    """Something failed inside Kiln; the message never carries internals."""


class UnavailableError(ProtocolError):
    """What the request needs (the tool catalog) cannot answer now; retrying later may work.

    Raised by a backend; the protocol layer passes it on with the request's id."""

    def for_request(self, request_id: RequestId, *, modern: bool = False) -> UnavailableError:
        return UnavailableError(self.message, request_id=request_id, data=self.data, modern=modern)


# JSON-RPC leaves -32000..-32099 to the server (implementation-defined errors): Kiln's own.
UNAVAILABLE = -32000  # the catalog store did not answer in time: retry later
UNAUTHORIZED = -32001  # no credential, or one that may not do this
REFUSED = -32002  # a request the application refused (a rule, a conflict, a missing thing)
RATE_LIMITED = -32029  # a quota refused the call


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

    def __init__(self, message: str, *, retry_after_s: int, data: Any = None) -> None:
        super().__init__(message, data=data)
        self.retry_after_s = retry_after_s


@dataclass(frozen=True)
class ErrorRule:
    code: int
    legacy_status: int  # HTTP status when the request is legacy era (or the era is unknown)
    modern_status: int  # HTTP status when the request claimed the 2026-07-28 envelope


# The one place where errors become codes and statuses (digest §2.4, §2.5, §5.4).
ERROR_TABLE: dict[type[ProtocolError], ErrorRule] = {
    ParseError: ErrorRule(PARSE_ERROR, 400, 400),
    InvalidRequestError: ErrorRule(INVALID_REQUEST, 400, 400),
    TransportError: ErrorRule(INVALID_REQUEST, 400, 400),  # status comes from the error itself
    MissingMetaError: ErrorRule(INVALID_PARAMS, 400, 400),
    HeaderMismatchError: ErrorRule(HEADER_MISMATCH, 400, 400),
    UnsupportedVersionError: ErrorRule(UNSUPPORTED_PROTOCOL_VERSION, 400, 400),
    MethodNotFoundError: ErrorRule(METHOD_NOT_FOUND, 200, 404),
    InvalidParamsError: ErrorRule(INVALID_PARAMS, 200, 200),
    InternalError: ErrorRule(INTERNAL_ERROR, 200, 200),
    UnavailableError: ErrorRule(UNAVAILABLE, 200, 200),
    MissingCapabilityError: ErrorRule(MISSING_REQUIRED_CLIENT_CAPABILITY, 400, 400),
    RateLimitedError: ErrorRule(RATE_LIMITED, 429, 429),
}


def rule_for(error: ProtocolError) -> ErrorRule:
    for cls in type(error).__mro__:
        rule = ERROR_TABLE.get(cls)
        if rule is not None:
            return rule
    return ERROR_TABLE[InternalError]


def error_status(error: ProtocolError) -> int:
    if isinstance(error, TransportError):
        return error.status
    rule = rule_for(error)
    return rule.modern_status if error.modern else rule.legacy_status


def error_code(error: ProtocolError) -> int:
    """The JSON-RPC code: the table's, unless the error carries its own (a replayed one)."""
    own = getattr(error, "code", None)
    return own if isinstance(own, int) else rule_for(error).code


def error_object(error: ProtocolError) -> dict[str, Any]:
    """The JSON-RPC error response for `error` (`id` null when the request id is unknown)."""
    return jsonrpc_error(
        error_code(error), error.message, request_id=error.request_id, data=error.data
    )
