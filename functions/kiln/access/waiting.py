"""Approvals that wait for a person: who must approve a call, and who may.

A view or a key with `confirm` may also list `approvers`: then a call of a tool its `confirm`
covers (kiln.access.approvals.needs_approval) is not asked of the caller by elicitation but
waits, as an MCP task, until one of the listed people approves it out of band (the studio's
inbox, `kiln approvals`, `/api/approvals`, a webhook). An approver is an author key's name
(`alice`) or an OAuth subject (`oauth:<sub>`); never the caller themself.

    {"tools": ["tag:ops"], "confirm": "destructive", "approvers": ["alice", "oauth:u-42"]}

With a view's and a key's approvers both covering a tool, any of them may approve (the union).
A person's approval stands in for the caller's own: such a call is never asked by elicitation.
The approval records themselves are `kiln.access.approval_store`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from kiln.access.approvals import CONFIRM_VALUES, needs_approval

META_KEY = "kiln/approval"  # a waiting call's task `_meta` key
MAX_APPROVERS = 20
OAUTH_PREFIX = "oauth:"
_KEY_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")
APPROVERS_RULE = (
    f"must be a list of 1 to {MAX_APPROVERS} approvers, each an author key's name (lowercase "
    "letters, digits, _ and -) or an OAuth subject as oauth:<sub>"
)


class ApproversRuleError(ValueError):
    """`approvers` broke a rule; the message names the field and the rule."""


def check_approvers(value: object, confirm: object) -> tuple[str, ...]:
    """A view's or key's checked `approvers` (empty: none); ApproversRuleError otherwise."""
    if value is None or value == []:
        return ()
    if not isinstance(value, list) or not 0 < len(value) <= MAX_APPROVERS:
        raise ApproversRuleError(f"approvers: {APPROVERS_RULE}")
    for index, entry in enumerate(value):
        if not isinstance(entry, str) or not _is_approver(entry):
            raise ApproversRuleError(f"approvers[{index}]: {APPROVERS_RULE}")
    if len(set(value)) != len(value):
        raise ApproversRuleError("approvers: names one approver twice")
    if confirm not in CONFIRM_VALUES:
        raise ApproversRuleError(
            'approvers: needs "confirm" beside it ("destructive" or "writes"): approvers '
            "approve the calls that confirm covers"
        )
    return tuple(value)


def _is_approver(entry: str) -> bool:
    if entry.startswith(OAUTH_PREFIX):
        return 0 < len(entry) - len(OAUTH_PREFIX) <= 256 and entry.isprintable()
    return bool(_KEY_NAME.fullmatch(entry))


def approver_name(principal: Any) -> str | None:
    """How `approvers` names this principal: a key's name, `oauth:<sub>` for a token."""
    kind, name = getattr(principal, "kind", None), getattr(principal, "name", None)
    if kind == "key" and isinstance(name, str):
        return name
    if kind == "jwt" and isinstance(name, str):
        return OAUTH_PREFIX + name
    return None


def waiting_for(
    view: Any, principal: Any, annotations: Mapping[str, Any] | None
) -> tuple[str, ...]:
    """The people one of whom must approve a call of a tool with these annotations, made by
    `principal` through `view` (empty: no person's approval is needed)."""
    found: list[str] = []
    for holder in (view, principal):
        approvers = getattr(holder, "approvers", ()) or ()
        if approvers and needs_approval(getattr(holder, "confirm", None), annotations):
            found.extend(a for a in approvers if a not in found)
    return tuple(found)


def refusal(approvers: tuple[str, ...], caller: str, principal: Any) -> str | None:
    """Why `principal` may not decide an approval the call of `caller` waits for (None: it
    may). `caller` is the caller's label (`key:ci`, `jwt:<sub>`)."""
    name = approver_name(principal)
    if name is None or name not in approvers:
        listed = ", ".join(approvers)
        return f"only its approvers may decide this approval ({listed}); you are not one of them"
    if getattr(principal, "label", None) == caller:
        return "the caller cannot approve their own call: another approver must"
    if getattr(principal, "kind", None) == "key" and not principal.can("author"):
        return f"key {name!r} is listed as an approver but is not an author key"
    return None


def waiting_message(confirm: Mapping[str, Any]) -> str:
    from kiln.access.approval_store import iso  # the store: on first use, not at a cold start

    approvers = " or ".join(str(a) for a in confirm.get("approvers", ()))
    until = iso(float(confirm.get("deadline", 0)))
    return (
        f"Waiting for a person's approval: {approvers} must approve this call (approval "
        f"{confirm.get('approval')}, until {until})."
    )


def waiting_meta(confirm: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A waiting call's task `_meta`: who must approve it, and until when (None: no such)."""
    if not confirm or "approval" not in confirm:
        return None
    from kiln.access.approval_store import iso

    return {
        META_KEY: {
            "id": confirm["approval"],
            "approvers": list(confirm.get("approvers", ())),
            "expiresAt": iso(float(confirm.get("deadline", 0))),
        }
    }
