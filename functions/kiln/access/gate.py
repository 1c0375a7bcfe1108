"""Per call: which view applies, whose quotas count, and what the ledger records."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kiln.access.ledger import CallLedger, CallRecord, Outcome
from kiln.access.quotas import Quota, QuotaCounters, QuotaExceededError
from kiln.access.views import View
from kiln.catalog.model import Tool

log = logging.getLogger("kiln.access.gate")


Limits = tuple[tuple[str, Quota], ...]  # (subject, quota) pairs, counted in this order


@dataclass(frozen=True)
class Caller:
    """Who is calling, as the ledger names them, and the quotas their calls count against."""

    label: str  # key:<name>, jwt:<subject> or anonymous
    view: str | None = None
    limits: Limits = ()  # key first, then view


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


def key_limits(principal: Any) -> Limits:
    """The quota of the principal's own key (known before the catalog is read)."""
    if principal is None or not getattr(principal, "key_id", None) or principal.quota.empty:
        return ()
    return ((f"key:{principal.key_id}", principal.quota),)


def caller_of(principal: Any, view: View | None) -> Caller:
    limits = list(key_limits(principal))
    label = "anonymous" if principal is None else str(principal.label)
    if view is not None and not view.quota.empty:
        limits.append((f"view:{view.name}", view.quota))
    return Caller(label, view.name if view else None, tuple(limits))


class Bookkeeping:
    """Blocking bookkeeping (ledger writes, quota refunds) run after a call was answered.

    Off the request's path, but tracked: `flush` waits for everything started so far, so a
    ledger query in this process sees every call answered before it.
    """

    def __init__(self) -> None:
        self._pending: set[asyncio.Future[None]] = set()

    async def run(self, work: Sequence[Callable[[], None]]) -> None:
        for item in work:
            try:
                await asyncio.to_thread(item)
            except Exception:  # the call was answered: say loudly that its record is missing
                log.exception("call bookkeeping failed (%s)", getattr(item, "func", item))

    def start(self, work: Sequence[Callable[[], None]]) -> None:
        task = asyncio.ensure_future(self.run(work))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def flush(self) -> None:
        if self._pending:
            await asyncio.wait(set(self._pending))


class CallGate:
    """Admits calls against their quotas and writes the ledger. Blocking: use from a thread."""

    def __init__(self, quotas: QuotaCounters | None, ledger: CallLedger | None) -> None:
        self.quotas = quotas
        self.ledger = ledger
        self.after = Bookkeeping()

    def digest(self, arguments: Mapping[str, Any]) -> str:
        return self.ledger.digest(arguments) if self.ledger is not None else ""

    def admit(self, limits: Limits) -> None:
        """Count one call against each quota; QuotaExceededError when one is spent, after
        giving back what this call had counted."""
        if self.quotas is None:
            return
        for index, (subject, quota) in enumerate(limits):
            try:
                self.quotas.admit(subject, quota)
            except QuotaExceededError:
                self.release(limits[:index])
                raise

    def release(self, limits: Limits) -> None:
        if self.quotas is not None:
            for subject, quota in limits:
                self.quotas.release(subject, quota)

    def refused(
        self, caller: Caller, tool: Tool, refusal: QuotaExceededError, *, started: float
    ) -> None:
        """Record a refused call (its arguments were never looked at: no digest)."""
        which = refusal.subject.partition(":")[0]
        self._record(caller, tool, "refused", digest="", started=started,
                     detail=f"{refusal.quota} of the {which}")  # fmt: skip

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
        if self.quotas is not None and run_seconds > 0:
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
