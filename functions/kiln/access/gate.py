"""Per call: which view applies, whose quotas count, and what the ledger records."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kiln.access.ledger import CallLedger, CallRecord, Outcome
from kiln.access.quotas import Quota, QuotaCounters, QuotaExceededError
from kiln.access.views import View
from kiln.catalog.model import Tool

log = logging.getLogger("kiln.access.gate")


@dataclass(frozen=True)
class Caller:
    """Who is calling, as the ledger names them, and the quotas their calls count against."""

    label: str  # key:<name>, jwt:<subject> or anonymous
    view: str | None = None
    limits: tuple[tuple[str, Quota], ...] = ()  # (subject, quota), key first, then view


def bound_view(principal: Any, views: Mapping[str, View]) -> str | None:
    """The view a principal may see only: its key's binding, or for a token the first view
    (by name) that names one of its scopes or its client."""
    if principal is None:
        return None
    if principal.view:
        return str(principal.view)
    grants: frozenset[str] = getattr(principal, "grants", frozenset())
    client = getattr(principal, "client", None)
    for name in sorted(views):
        view = views[name]
        if grants & set(view.oauth_scopes) or (client and client in view.oauth_clients):
            return name
    return None


def caller_of(principal: Any, view: View | None) -> Caller:
    limits: list[tuple[str, Quota]] = []
    label = "anonymous" if principal is None else str(principal.label)
    if principal is not None and principal.key_id and not principal.quota.empty:
        limits.append((f"key:{principal.key_id}", principal.quota))
    if view is not None and not view.quota.empty:
        limits.append((f"view:{view.name}", view.quota))
    return Caller(label, view.name if view else None, tuple(limits))


class CallGate:
    """Admits calls against their quotas and writes the ledger. Blocking: use from a thread."""

    def __init__(self, quotas: QuotaCounters | None, ledger: CallLedger | None) -> None:
        self.quotas = quotas
        self.ledger = ledger

    def digest(self, arguments: Mapping[str, Any]) -> str:
        return self.ledger.digest(arguments) if self.ledger is not None else ""

    def admit(self, caller: Caller, tool: Tool, *, digest: str, started: float) -> None:
        """Count the call against every quota; on a refusal, give back what was counted,
        record the refusal, and raise QuotaExceededError."""
        if self.quotas is None:
            return
        for index, (subject, quota) in enumerate(caller.limits):
            try:
                self.quotas.admit(subject, quota)
            except QuotaExceededError as refused:
                for earlier, earlier_quota in caller.limits[:index]:
                    self.quotas.release(earlier, earlier_quota)
                self._record(
                    caller, tool, "refused", digest=digest, started=started,
                    detail=f"{refused.quota} of {subject.partition(':')[0]}",
                )  # fmt: skip
                raise

    def finish(
        self,
        caller: Caller,
        tool: Tool,
        outcome: Outcome,
        *,
        digest: str,
        started: float,
        run_seconds: float,
        output_bytes: int,
    ) -> None:
        """Charge the run's seconds to daily quotas and record the call."""
        if self.quotas is not None:
            for subject, quota in caller.limits:
                if quota.run_seconds_per_day is not None:
                    self.quotas.charge(subject, run_seconds)
        self._record(
            caller, tool, outcome, digest=digest, started=started,
            duration_ms=run_seconds * 1000, output_bytes=output_bytes,
        )  # fmt: skip

    def _record(
        self,
        caller: Caller,
        tool: Tool,
        outcome: Outcome,
        *,
        digest: str,
        started: float,
        duration_ms: float = 0.0,
        output_bytes: int = 0,
        detail: str | None = None,
    ) -> None:
        if self.ledger is None:
            return
        entry = CallRecord(
            at="",
            caller=caller.label,
            tool=tool.name,
            outcome=outcome,
            revision=tool.head.number,
            view=caller.view,
            bundle=tool.head.bundle_id,
            duration_ms=duration_ms,
            output_bytes=output_bytes,
            args_digest=digest,
            detail=detail,
        )
        self.ledger.record(entry, started=started)
