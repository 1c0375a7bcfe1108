"""Per call: which view applies, whose quotas count, and what the ledger records."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from kiln.access.quotas import QuotaCounters, QuotaExceededError
from kiln.access.views import View
from kiln.accounting.account import CallAccount, Caller, Limits
from kiln.accounting.pending import PendingLedger
from kiln.catalog.model import Tool

if TYPE_CHECKING:  # the ledger loads with the first call's entry (stack.call_gate makes it lazily)
    from kiln.accounting.ledger import CallLedger, CallRecord, Outcome

log = logging.getLogger("kiln.accounting.gate")


@dataclass(frozen=True)
class CallTicket:
    """What the ledger entry and the run-seconds charge of a call that ends later need: a
    task-augmented `tools/call` keeps it in its task record until its run ends (possibly in
    another process, the worker function). Never an argument's value: their digest only."""

    caller: str
    view: str | None
    tool: str
    revision: int
    bundle: str | None
    digest: str
    started: float  # epoch seconds: when the call arrived
    charge: tuple[str, ...] = ()  # subjects whose run-seconds per day the run counts against

    def as_json(self) -> dict[str, Any]:
        return {**asdict(self), "charge": list(self.charge)}

    @classmethod
    def from_json(cls, value: Any) -> CallTicket | None:
        """The ticket a task record keeps; None for a record without one (or unreadable)."""
        if not isinstance(value, Mapping):
            return None
        try:
            return cls(
                caller=str(value["caller"]),
                view=None if value.get("view") is None else str(value["view"]),
                tool=str(value["tool"]),
                revision=int(value["revision"]),
                bundle=None if value.get("bundle") is None else str(value["bundle"]),
                digest=str(value.get("digest", "")),
                started=float(value["started"]),
                charge=tuple(str(s) for s in value.get("charge", ())),
            )
        except (KeyError, TypeError, ValueError):
            log.error("a task record holds an unreadable call ticket; its call is not ledgered")
            return None


def outcome_of(is_error: bool, timed_out: bool, not_ready: bool = False) -> Outcome:
    """How the ledger names a run's end (the same for a plain call and a task)."""
    if timed_out:
        return "timeout"
    if not_ready:
        return "not_ready"
    return "tool_error" if is_error else "ok"


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
    """What a ledger query in this process waits for: on `kiln dev`, the entries held on disk
    reach the store first (`drain`), so the query sees every call answered before it."""

    def __init__(self) -> None:
        self.drain: Callable[[], object] | None = None  # entries held locally (kiln dev)

    async def flush(self) -> None:
        if self.drain is not None:
            await asyncio.to_thread(self.drain)


class CallGate:
    """Admits calls against their quotas and writes the ledger. Blocking: use from a thread."""

    def __init__(self, quotas: QuotaCounters | None, ledger: CallLedger | None) -> None:
        self.quotas = quotas
        self.ledger = ledger
        self.after = Bookkeeping()
        self.pending: PendingLedger | None = None

    def hold_locally(self, pending: PendingLedger) -> None:
        """Ledger entries go to `pending`'s file before the answer and to the store right
        after (`kiln dev`: kiln.accounting.pending); a ledger query waits for them."""
        self.pending = pending
        self.after.drain = pending.drain

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

    def refused(self, account: CallAccount, refusal: QuotaExceededError) -> None:
        """Close and record a call a quota refused (`CallAccount.refuse`)."""
        self._write(account.refuse(refusal), started=account.started)

    def finish(
        self,
        account: CallAccount,
        outcome: Outcome,
        *,
        digest: str,
        started: float,
        run_seconds: float,
        output_bytes: int,
        detail: str | None = None,
    ) -> None:
        """Close and record the call (its run's seconds are charged by `charge_run`)."""
        entry = account.close(
            outcome, digest=digest, run_seconds=run_seconds, output_bytes=output_bytes,
            detail=detail,
        )  # fmt: skip
        self._write(entry, started=started)

    def charges(self, caller: Caller) -> tuple[str, ...]:
        """The subjects whose daily run-seconds a call of `caller` counts against."""
        if self.quotas is None:
            return ()
        return tuple(s for s, quota in caller.limits if quota.run_seconds_per_day is not None)

    def charge_run(self, subjects: Sequence[str], run_seconds: float) -> None:
        """Add a finished run's seconds to the day of each subject."""
        if self.quotas is not None and run_seconds > 0:
            for subject in subjects:
                self.quotas.charge(subject, run_seconds)

    def ticket(self, caller: Caller, tool: Tool, arguments: Mapping[str, Any]) -> CallTicket:
        """The ticket of an admitted call whose run ends later (a task)."""
        charge = self.charges(caller)
        return CallTicket(
            caller=caller.label, view=caller.view, tool=tool.name, revision=tool.head.number,
            bundle=tool.head.bundle_id, digest=self.digest(arguments), started=time.time(),
            charge=charge,
        )  # fmt: skip

    def entry_item(
        self,
        ticket: CallTicket,
        outcome: Outcome,
        *,
        duration_ms: float,
        output_bytes: int = 0,
        detail: str | None = None,
    ) -> dict[str, Any] | None:
        """The ledger item of a ticket's call, for a write that settles its task in the same
        transaction (so it is written exactly once); None when the ledger is off."""
        if self.ledger is None:
            return None
        from kiln.accounting.ledger import CallRecord

        entry = CallRecord(
            at="", caller=ticket.caller, tool=ticket.tool, outcome=outcome,
            revision=ticket.revision, view=ticket.view, bundle=ticket.bundle,
            duration_ms=max(duration_ms, 0.0), output_bytes=output_bytes,
            args_digest=ticket.digest, detail=detail,
        )  # fmt: skip
        item, _ = self.ledger.item(entry, started=ticket.started)
        return item

    def record_ticket(self, ticket: CallTicket, outcome: Outcome, *, detail: str) -> None:
        """Record a ticket's call that ended without a run (its task was never started)."""
        item = self.entry_item(ticket, outcome, duration_ms=0.0, detail=detail)
        if item is not None and self.ledger is not None:
            self.ledger.write(item)

    def charge(self, ticket: CallTicket, run_seconds: float) -> None:
        """Count a ticket's run against the daily run-seconds of its caller's quotas."""
        self.charge_run(ticket.charge, run_seconds)

    def _write(self, entry: CallRecord, *, started: float) -> None:
        if self.ledger is None:
            return
        if self.pending is not None:
            self.pending.hold(self.ledger.item(entry, started=started)[0])
            return
        self.ledger.record(entry, started=started)
