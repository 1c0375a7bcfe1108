"""A client's pin on a tool: the fingerprint it approved, sent with a `tools/call`.

Kiln lists each catalog tool's fingerprint under `_meta["dev.kiln/fingerprint"]`
(`sha256:<hex>`, kiln/catalog/fingerprint.py). A client that approved a tool as listed may
send that value back in the call's `params._meta` under the same key; when the tool it names
is no longer that definition, the call is refused before anything runs (-32602, naming the
fingerprint the tool has now), never served as something else. While a tool's packages are
being built no fingerprint can name their versions: it is listed as PENDING, and a pinned call
is refused (kiln/catalog/README.md).
"""

from __future__ import annotations

import re
from typing import Any

from kiln.protocol.backend import ToolView
from kiln.protocol.errors import InvalidParamsError, RequestId

META_KEY = "dev.kiln/fingerprint"
_FINGERPRINT = re.compile(r"sha256:[0-9a-f]{64}")
# A listed tool's fingerprint while its packages are being built: none can name their versions.
PENDING = "pending"


def fingerprint_meta(fingerprint: str) -> dict[str, str]:
    """The `_meta` a listed tool carries."""
    return {META_KEY: fingerprint}


def pinned_fingerprint(params: dict[str, Any], request_id: RequestId) -> str | None:
    """The fingerprint a `tools/call` was sent with, if any; -32602 when it is not one."""
    meta = params.get("_meta")
    sent = meta.get(META_KEY) if isinstance(meta, dict) else None
    if sent is None:
        return None
    if not isinstance(sent, str) or _FINGERPRINT.fullmatch(sent) is None:
        raise InvalidParamsError(
            f"Invalid params: _meta[{META_KEY!r}] must be a tool's fingerprint as tools/list "
            "gives it: sha256: followed by 64 lower-case hex digits",
            request_id=request_id,
        )
    return sent


def check_pinned(params: dict[str, Any], tool: ToolView, request_id: RequestId) -> None:
    """Refuse (-32602) a call pinned to a fingerprint that `tool` no longer has."""
    sent = pinned_fingerprint(params, request_id)
    if sent is None:
        return
    current = (tool.meta or {}).get(META_KEY)
    if sent == current:
        return
    if current == PENDING:
        message = (
            f"Tool {tool.name!r} was not run: its packages are still being built, so it has "
            f"no fingerprint yet to check the {sent} sent in _meta against. List the tools "
            "again once they are ready and check the new fingerprint"
        )
    elif current is None:
        message = (
            f"Tool {tool.name!r} was not run: it has no fingerprint (it is not a catalog "
            f"tool), so the {sent} sent in _meta cannot be checked"
        )
    else:
        message = (
            f"Tool {tool.name!r} was not run: it is no longer the definition you approved "
            f"(you sent {sent}; its fingerprint is now {current}). List the tools again, "
            "check what changed, and call it with the new fingerprint to accept it"
        )
    data = {"name": tool.name, "fingerprint": current, "sent": sent}
    raise InvalidParamsError(message, request_id=request_id, data=data)
