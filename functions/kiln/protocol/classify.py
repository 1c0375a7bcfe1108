"""Which era a message belongs to, and the modern envelope's `_meta` and header checks.

Body first (digest §1): a `params._meta` protocol-version claim makes a request modern, even
for `initialize`; without a claim, an `MCP-Protocol-Version` header naming a modern revision
still makes it modern (and then the missing envelope is the error); everything else is legacy.
The modern checks run in the order of digest §5.4: `_meta` keys, version header, version
support, `Mcp-Method` / `Mcp-Name`.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from kiln.protocol.errors import (
    HeaderMismatchError,
    InvalidRequestError,
    MissingMetaError,
    RequestId,
    UnsupportedVersionError,
    shown,
)
from kiln.protocol.spec import CLIENT_CAPABILITIES_META_KEY, PROTOCOL_VERSION_META_KEY
from kiln.protocol.wire import DEFAULT_LEGACY, LEGACY_VERSIONS, MODERN_VERSIONS

VERSION_HEADER = "mcp-protocol-version"
METHOD_HEADER = "mcp-method"
NAME_HEADER = "mcp-name"

# Which body field `Mcp-Name` mirrors, per method (2026-07-28 streamable-http §Standard Headers).
# The tasks extension (SEP-2663) adds its task methods, which name `params.taskId`.
_NAME_FIELD = {
    "tools/call": "name",
    "prompts/get": "name",
    "resources/read": "uri",
    "tasks/get": "taskId",
    "tasks/update": "taskId",
    "tasks/cancel": "taskId",
}
_OWS = " \t"


@dataclass(frozen=True)
class Envelope:
    """One JSON-RPC message, placed in its era."""

    era: Literal["legacy", "modern"]
    version: str
    method: str
    params: dict[str, Any]
    request_id: RequestId
    is_notification: bool

    @property
    def modern(self) -> bool:
        return self.era == "modern"


def request_id_of(message: Any) -> RequestId:
    """The message's id when it is a usable JSON-RPC id, else None."""
    if isinstance(message, dict):
        rid = message.get("id")
        if isinstance(rid, str) or (isinstance(rid, int) and not isinstance(rid, bool)):
            return rid
    return None


def is_response(message: Any) -> bool:
    return (
        isinstance(message, dict)
        and "method" not in message
        and ("result" in message or "error" in message)
    )


def claims_modern(message: Any) -> bool:
    if not isinstance(message, dict):
        return False
    params = message.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    return isinstance(meta, dict) and PROTOCOL_VERSION_META_KEY in meta


def header(headers: Mapping[str, str], name: str) -> str | None:
    """A header value with RFC 9110 optional whitespace stripped; None when absent."""
    value = headers.get(name)
    return None if value is None else value.strip(_OWS)


def classify(
    message: Any,
    headers: Mapping[str, str],
    *,
    http: bool = True,
    legacy_version: str | None = None,
) -> Envelope | None:
    """Place one message in its era; None for a posted JSON-RPC response (legacy: accepted).

    `http` False (stdio) skips the HTTP header checks. `legacy_version` is the version a
    legacy request speaks when it carries no header (stdio: the negotiated one).
    """
    rid = request_id_of(message)
    header_version = header(headers, VERSION_HEADER) if http else None
    modern = claims_modern(message) or header_version in MODERN_VERSIONS
    if not isinstance(message, dict):
        raise InvalidRequestError(
            "Invalid Request: a message must be a JSON object", request_id=rid, modern=modern
        )
    if is_response(message):
        if modern:
            raise InvalidRequestError(
                "Invalid Request: clients must not post JSON-RPC responses in 2026-07-28",
                request_id=rid,
                modern=True,
            )
        return None
    method = message.get("method")
    if message.get("jsonrpc") != "2.0" or not isinstance(method, str):
        raise InvalidRequestError(
            'Invalid Request: a message needs "jsonrpc": "2.0" and a string "method"',
            request_id=rid,
            modern=modern,
        )
    params = message.get("params", {})
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise InvalidRequestError(
            "Invalid Request: params must be an object", request_id=rid, modern=modern
        )
    is_notification = "id" not in message
    if is_notification:
        # Notifications carry no rules worth refusing over a stateless POST: accept them.
        era: Literal["legacy", "modern"] = "modern" if modern else "legacy"
        version = MODERN_VERSIONS[-1] if modern else (header_version or "")
        return Envelope(era, version, method, params, None, True)
    if modern:
        version = _check_modern(method, params, headers, rid, http=http)
        return Envelope("modern", version, method, params, rid, False)
    if header_version is not None and header_version not in LEGACY_VERSIONS:
        raise UnsupportedVersionError(
            f"Bad Request: unsupported MCP-Protocol-Version header {shown(header_version)} "
            f"(supported versions: {', '.join(LEGACY_VERSIONS + MODERN_VERSIONS)})",
            request_id=rid,
            data={"supported": list(LEGACY_VERSIONS), "requested": header_version[:64]},
        )
    version = header_version or legacy_version or DEFAULT_LEGACY
    return Envelope("legacy", version, method, params, rid, False)


def _check_modern(
    method: str, params: dict[str, Any], headers: Mapping[str, str], rid: RequestId, *, http: bool
) -> str:
    meta = params.get("_meta")
    if not isinstance(meta, dict):
        raise MissingMetaError(
            "Invalid params: a 2026-07-28 request needs params._meta with "
            f"'{PROTOCOL_VERSION_META_KEY}' and '{CLIENT_CAPABILITIES_META_KEY}'",
            request_id=rid,
            modern=True,
        )
    body_version = meta.get(PROTOCOL_VERSION_META_KEY)
    if not isinstance(body_version, str):
        raise MissingMetaError(
            f"Invalid params: params._meta['{PROTOCOL_VERSION_META_KEY}'] must be a string",
            request_id=rid,
            modern=True,
        )
    if not isinstance(meta.get(CLIENT_CAPABILITIES_META_KEY), dict):
        raise MissingMetaError(
            f"Invalid params: params._meta['{CLIENT_CAPABILITIES_META_KEY}'] must be an object",
            request_id=rid,
            modern=True,
        )
    if http:
        _check_header(headers, VERSION_HEADER, "MCP-Protocol-Version", body_version, rid)
    if body_version not in MODERN_VERSIONS:
        raise UnsupportedVersionError(
            f"Unsupported protocol version: {shown(body_version)} "
            f"(supported versions: {', '.join(MODERN_VERSIONS)})",
            request_id=rid,
            data={"supported": list(MODERN_VERSIONS), "requested": body_version},
            modern=True,
        )
    if http:
        _check_header(headers, METHOD_HEADER, "Mcp-Method", method, rid,
                      what="the request's method")  # fmt: skip
        field = _NAME_FIELD.get(method)
        if field is not None:
            _check_header(headers, NAME_HEADER, "Mcp-Name", params.get(field), rid, encoded=True,
                          what=f"params.{field} of {method}")  # fmt: skip
    return body_version


def _check_header(
    headers: Mapping[str, str],
    key: str,
    label: str,
    expected: Any,
    rid: RequestId,
    *,
    encoded: bool = False,
    what: str = "",
) -> None:
    raw = header(headers, key)
    if raw is None:
        known = what and isinstance(expected, str)
        needs = f" (it carries {what}: {shown(expected)})" if known else ""
        raise HeaderMismatchError(
            f"Header mismatch: required header {label} is missing{needs}",
            request_id=rid,
            modern=True,
        )
    if not all(" " <= ch <= "~" or ch == "\t" for ch in raw):
        raise HeaderMismatchError(
            f"Header mismatch: {label} header contains characters outside visible ASCII; "
            "use the =?base64?...?= form",
            request_id=rid,
            modern=True,
        )
    value = _decode_sentinel(raw, label, rid) if encoded else raw
    if value != expected:
        body = "the body (no value)"
        if isinstance(expected, str):
            body = f"body value {shown(expected)}"
        raise HeaderMismatchError(
            f"Header mismatch: {label} header value {shown(value)} does not match {body}",
            request_id=rid,
            modern=True,
        )


def _decode_sentinel(raw: str, label: str, rid: RequestId) -> str:
    if not (raw.startswith("=?base64?") and raw.endswith("?=")):
        return raw
    try:
        return base64.b64decode(raw[len("=?base64?") : -2], validate=True).decode("utf-8")
    except (binascii.Error, ValueError) as exc:
        raise HeaderMismatchError(
            f"Header mismatch: {label} header is not valid =?base64?...?= UTF-8",
            request_id=rid,
            modern=True,
        ) from exc
