"""One call's account: what was admitted, what it is charged, and its ledger entry.

Admission (`CatalogBackend.get_tool`, counting through `CallGate.admit`) makes one `CallAccount` per
`tools/call`: who calls (`Caller`: the ledger's label, the view, the quotas counted), the tool at
the revision the view serves, and the quota counts the call took (`claimed`). A call refused by a
quota gets an account too, closed at once with its `refused` entry. The call's end closes the
account once with its outcome: `close` fills the ledger entry, and a second close is an error
(AccountClosedError), so no call is ledgered twice.

Later work hangs on it: an inner call's account names its parent (`parent`), an idempotency key
finds its entry, an approval that waits keeps its account open (DESIGN.md, "Where wave 4 goes").
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from kiln.access.quotas import Quota, QuotaExceededError
from kiln.catalog.model import Tool

if TYPE_CHECKING:  # the ledger loads with the first call's entry, not in a cold start's init
    from kiln.accounting.ledger import CallRecord, Outcome

log = logging.getLogger("kiln.accounting.account")

Limits = tuple[tuple[str, Quota], ...]  # (subject, quota) pairs, counted in this order
Bookkeeping = Callable[[], object]  # blocking: a ledger write, a quota refund
State = Literal["admitted", "charged", "closed"]


@dataclass(frozen=True)
class Caller:
    """Who is calling, as the ledger names them, and the quotas their calls count against."""

    label: str  # key:<name>, jwt:<subject> or anonymous
    view: str | None = None
    limits: Limits = ()  # key first, then view


class AccountClosedError(RuntimeError):
    """A call's account closed a second time (its ledger entry is written once)."""


@dataclass(frozen=True)
class Ran:
    """What a call's last run leaves for its ledger entry, written once its answer is shaped
    (`CatalogBackend.close_call`: the caller may get an error though the run succeeded)."""

    failed: bool
    timed_out: bool
    not_ready: bool
    digest: str
    started: float  # epoch seconds: when the run was asked for
    run_seconds: float
    output_bytes: int
    detail: str | None = None  # who approved it


def _new_id() -> str:
    from kiln.accounting.ledger import new_id

    return new_id()


@dataclass(eq=False)
class CallAccount:
    """The bookkeeping of one call, from its admission to its ledger entry."""

    caller: Caller
    tool: Tool
    started: float = field(default_factory=time.time)  # epoch seconds: when it was admitted
    claimed: Limits = ()  # the quota counts this call took (given back if it never runs)
    parent: str | None = None  # the ledger id of the call whose run made this one (inner)
    id: str = field(default_factory=_new_id)  # its ledger entry's id, known to inner calls
    entry: CallRecord | None = None  # set once, by `close`
    ran: Ran | None = None  # the last run's facts (a call that asks runs more than once)
    refusal: QuotaExceededError | None = None

    @property
    def revision(self) -> int:
        return self.tool.head.number

    @property
    def state(self) -> State:
        if self.entry is not None:
            return "closed"
        return "charged" if self.claimed else "admitted"

    def unclaimed(self) -> Limits:
        """The caller's quotas this call has not been counted against yet."""
        return tuple(limit for limit in self.caller.limits if limit not in self.claimed)

    def charge(self, limits: Limits) -> None:
        """Record quota counts taken for this call (CallGate.claim took them)."""
        self._open()
        self.claimed = (*self.claimed, *limits)

    def refuse(self, refusal: QuotaExceededError) -> CallRecord:
        """Close a call a quota refused (its arguments were never looked at: no digest);
        what it had claimed is the caller's to give back."""
        self.refusal = refusal
        which = refusal.subject.partition(":")[0]
        return self.close("refused", detail=f"{refusal.quota} of the {which}")

    def close(
        self,
        outcome: Outcome,
        *,
        digest: str = "",
        run_seconds: float = 0.0,
        output_bytes: int = 0,
        detail: str | None = None,
    ) -> CallRecord:
        """The call ended: its ledger entry (its run's seconds are charged apart)."""
        from kiln.accounting.ledger import CallRecord

        self._open()
        head = self.tool.head
        self.entry = CallRecord(
            at="", caller=self.caller.label, tool=self.tool.name, outcome=outcome,
            revision=head.number, view=self.caller.view, bundle=head.bundle_id,
            duration_ms=run_seconds * 1000, output_bytes=output_bytes, args_digest=digest,
            detail=detail, id=self.id, parent=self.parent,
        )  # fmt: skip
        return self.entry

    def _open(self) -> None:
        if self.entry is not None:
            raise AccountClosedError(
                f"the account of a call of {self.tool.name!r} ({self.caller.label}) is closed "
                f"already ({self.entry.outcome}): a call is ledgered once"
            )


class CallBook:
    """The bookkeeping one request's calls leave for their edge (`kiln.api.mcp_serving`): each
    piece starts at once, in a thread, alongside shaping and sending the answer, and the edge
    waits for all of it (`close`) before the answer leaves, or after a streamed one. So an
    answered call is in the ledger even if the server is killed the moment after, and the
    answer waits for the slowest piece only. Where there is no book (stdio), the backend does
    its bookkeeping at once."""

    def __init__(self) -> None:
        self._started: list[tuple[Bookkeeping, asyncio.Future[object]]] = []

    def keep(self, work: Bookkeeping) -> None:
        self._started.append((work, asyncio.ensure_future(asyncio.to_thread(work))))

    async def close(self) -> None:
        started, self._started = self._started, []
        for work, running in started:
            try:
                await running
            except Exception:  # the call was answered: say loudly that its record is missing
                log.exception("call bookkeeping failed (%s)", getattr(work, "func", work))
