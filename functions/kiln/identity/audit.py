"""Who changed what, when, to which revision: one structured log line per catalog write."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

from kiln.identity.policy import Principal

logger = logging.getLogger("kiln.audit")

ACTIONS = frozenset(
    {"create", "update", "rename", "enable", "disable", "delete", "undelete", "restore",
     "secret.set", "secret.delete", "key.create", "key.bind", "key.revoke",
     "approval.approve", "approval.deny", "approval.expire", "approval.refuse"}
)  # fmt: skip


def created_by(principal: Principal | None) -> str:
    """The value a revision stores in `created_by` for a write by this principal."""
    if principal is None:
        return "local"  # written straight to the catalog (kiln tools push, kiln dev seeding)
    return principal.label


def record_write(
    principal: Principal | None,
    *,
    action: str,
    tool_name: str,
    tool_id: str | None = None,
    revision: int | None = None,
    at: datetime | None = None,
    **details: Any,
) -> dict[str, Any]:
    """Log one `kiln.audit` line after a successful write; returns the fields it logged.

    `created_by` in the result is what the revision stores. `details` may carry names (a
    secret's name, a key's name) but never a value.
    """
    if action not in ACTIONS:
        raise ValueError(f"unknown audit action {action!r}; one of {sorted(ACTIONS)}")
    moment = (at or datetime.now(UTC)).astimezone(UTC)
    entry: dict[str, Any] = {
        "audit": action,
        "created_by": created_by(principal),
        "tool": tool_name,
        "tool_id": tool_id,
        "revision": revision,
        "at": moment.isoformat(timespec="seconds").replace("+00:00", "Z"),
        **details,
    }
    logger.info(json.dumps(entry, sort_keys=True, default=str))
    return entry
