"""Runs one stored task: the tool through the unchanged runner, a lease kept alive meanwhile.

The worker renews the task's lease every `heartbeat_s`. The renewal is conditional on the
task still being `working`, so a failed renewal means someone cancelled it: the run is
cancelled, which makes the runner kill its whole process tree before `execute` returns. A
worker that dies stops renewing; the next reader sees the lease run out and fails the task
(`TaskService.get_task`), so no task stays `working` forever.

A task-augmented `tools/call` counts like a plain call: the worker writes its ledger entry
in the transaction that settles the task (whoever settles it writes the entry, so it is
written once) and charges the run's seconds to its caller's daily quotas, also when the
run was cancelled or stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import KW_ONLY, dataclass, replace
from typing import TYPE_CHECKING, Any

from kiln.access.approval_store import ApprovalStore, iso
from kiln.access.approvals import Requirement
from kiln.accounting.gate import CallGate, CallTicket, outcome_of
from kiln.accounting.ledger import Outcome
from kiln.catalog.model import Tool
from kiln.protocol.backend import Conversation, ToolOutcome
from kiln.protocol.calling import RunFailedError, ToolCaller
from kiln.protocol.errors import error_data, error_object
from kiln.protocol.inner import calls_in
from kiln.protocol.spec import INTERNAL_ERROR
from kiln.serving.conversation import Approval, approval_for
from kiln.tasks.settings import TaskSettings
from kiln.tasks.store import TaskCaller, TaskItem, TaskStore

if TYPE_CHECKING:
    from kiln.serving.backend import CatalogBackend

log = logging.getLogger("kiln.tasks")


ASKABLE = ("elicitation", "sampling", "roots")


def _caller(item: TaskItem) -> tuple[TaskCaller | None, str | None]:
    """Who the task's run acts for (its tool's connections are that caller's), and the base
    URL a connect link names."""
    found = item.acts_for
    if not found:
        return None, None
    return TaskCaller(found["kind"], found["name"], found.get("key_id")), found.get("base_url")


NOTE_EVERY_S = 1.0  # at most one status-message write a second from a task's progress


class _StatusNotes:
    """A task run's progress lines as its status message (throttled, never blocking the run).

    A line that comes within NOTE_EVERY_S of the last write waits; `flush` (at the run's end,
    before the task moves on) writes the latest such line and waits for every write, so the
    task ends with its run's last progress as its status message. A run in the runner
    function reports all its lines at its end (kiln.runner.remote): the last one is written.
    """

    def __init__(self, store: TaskStore, item: TaskItem, now_iso: Callable[[], str]) -> None:
        self._store = store
        self._item = item
        self._now_iso = now_iso
        self._last = -math.inf
        self._waiting: str | None = None
        self._writing: asyncio.Future[Any] | None = None

    def hear(self, kind: str, fields: Mapping[str, Any]) -> None:
        if kind != "progress":
            return
        total = fields.get("total")
        text = f"{fields['progress']:g}" + (f" of {total:g}" if total is not None else "")
        if fields.get("message"):
            text += f": {fields['message']}"
        now = time.monotonic()
        if now - self._last < NOTE_EVERY_S:
            self._waiting = text[:500]
            return
        self._last, self._waiting = now, None
        self._write(text[:500])

    def _write(self, text: str) -> None:
        task = asyncio.ensure_future(self._note(self._writing, text))
        task.add_done_callback(lambda done: done.exception())  # a lost note is no failure
        self._writing = task

    async def _note(self, before: asyncio.Future[Any] | None, text: str) -> None:
        if before is not None:  # in order: a later line never lands under an earlier one
            await asyncio.gather(before, return_exceptions=True)
        await asyncio.to_thread(self._store.note, self._item, text, now=self._now_iso())

    async def flush(self) -> None:
        if self._waiting is not None:
            self._write(self._waiting)
            self._waiting = None
        if self._writing is not None:
            await asyncio.gather(self._writing, return_exceptions=True)


STOPPED = "The server stopped while this task ran, and its run was stopped; call the tool again."


def internal_error(message: str) -> dict[str, Any]:
    return error_data(INTERNAL_ERROR, message)


@dataclass(eq=False)
class TaskWorker:
    store: TaskStore
    tools: CatalogBackend  # finds a task's tool at its revision and runs it
    shaper: ToolCaller
    settings: TaskSettings
    _: KW_ONLY
    now_iso: Callable[[], str]
    clock: Callable[[], float] = time.time
    gate: CallGate | None = None
    approvals: ApprovalStore | None = None  # calls that waited for a person's approval

    async def run(
        self,
        owner: str,
        task_id: str,
        *,
        time_left_s: float | None = None,
        cancelled: asyncio.Event | None = None,
        slot: asyncio.Semaphore | None = None,
    ) -> str:
        """Run the task to its end; returns the status it ends in (or found it in).

        `slot` bounds how many task runs of this process use the runner at once; a task
        waiting for one keeps its lease and can be cancelled meanwhile.
        """
        item = await asyncio.to_thread(self.store.get, owner, task_id)
        if item is None or item.status != "working":
            return item.status if item else "missing"
        if not await self._renew(item):
            return "cancelled"
        person = await self._claim(item)
        if person is False:  # not approved yet, or already run: nothing runs
            return item.status
        tool = await self.tools.find(item.tool, item.revision)
        if tool is None:
            return await self._fail(
                item, f"Tool '{item.tool}' was removed or disabled before its task ran"
            )
        approval = _approval(item, tool)
        if approval is not None and approval.outcome is not None:  # asked, or declined
            return await self._unapproved(item, tool, approval)
        began = [math.inf]  # when the run got its slot (a queued run has used no seconds yet)
        run = asyncio.create_task(self._execute(tool, item, time_left_s, slot, began))
        try:
            watched = await self._watch(item, run, cancelled)
        except asyncio.CancelledError:
            # This worker is being stopped (the server shuts down): stop the run with it and
            # say so in the task. Should that write fail too, the lease runs out instead.
            run.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await run
            with contextlib.suppress(Exception):
                await self._fail(item, STOPPED, ran_s=self._ran(began))
            raise
        if not watched:  # cancelled: the cancel wrote the call's entry; the run still counts
            await self._charge(item, self._ran(began))
            return "cancelled"
        try:
            outcome, result = run.result()
        except Exception:
            log.exception("task %s: the run failed", task_id)
            ran_s = self._ran(began)
            return await self._fail(item, "Internal error: the run could not finish", ran_s=ran_s)
        ended = _Ended.of(outcome, result, self._ran(began)).approved(item, approval)
        if isinstance(person, str):
            ended = replace(ended, detail=person)
        if outcome.questions and not outcome.is_error and not calls_in(outcome.questions):
            return await self._park(item, outcome, ended)  # (a call is not the client's)
        return await self._finish(item, tool, outcome, ended)

    async def _claim(self, item: TaskItem) -> str | bool:
        """A call that waited for a person's approval runs only after this worker moved the
        approval approved -> running (kiln.access.approval_store): False when another did,
        or nobody approved it; else its ledger detail. True: no person's approval."""
        approval_id = (item.confirm or {}).get("approval")
        if not approval_id:
            return True
        if self.approvals is None:
            log.error("task %s waits for an approval, and this worker keeps none", item.task_id)
            return False
        claimed = await asyncio.to_thread(self.approvals.claim_run, str(approval_id))
        approval = claimed.approval
        if not claimed.done or approval is None:
            return False
        at = iso(approval.decided_at) if approval.decided_at else "?"
        return f"task; approved by {approval.decided_by} at {at}"

    async def _finish(self, item: TaskItem, tool: Tool, outcome: ToolOutcome, ended: _Ended) -> str:
        """The run's result shaped as a tools/call result would be, and the task settled."""
        try:
            # Output validation may be costly: off the event loop, as for calls.
            view = self.tools.view(tool)
            shaped = await asyncio.to_thread(self.shaper.shape, view, outcome, item.version)
        except RunFailedError as error:
            ended = ended.as_error()
            return await self._settle(item, "failed", ended, error=error_object(error)["error"])
        if shaped.get("isError"):  # e.g. output that breaks the outputSchema: not `ok`
            ended = ended.as_error()
        return await self._settle(item, "completed", ended, result=shaped)

    async def _execute(
        self,
        tool: Tool,
        item: TaskItem,
        time_left_s: float | None,
        slot: asyncio.Semaphore | None,
        began: list[float],
    ) -> tuple[ToolOutcome, Any]:
        # A task's questions reach its client through tasks/get and come back through
        # tasks/update; its progress becomes the task's status message.
        notes = _StatusNotes(self.store, item, self.now_iso)
        talk = Conversation(item.answers or {}, ASKABLE, notes.hear)
        async with slot if slot is not None else contextlib.nullcontext():
            began[0] = self.clock()
            ran = await self.tools.execute(
                tool, item.arguments, time_left_s=time_left_s, conversation=talk,
                caller=_caller(item),
            )  # fmt: skip
        await notes.flush()  # before the task moves on: it ends with the last progress
        return ran

    async def _unapproved(self, item: TaskItem, tool: Tool, approval: Approval) -> str:
        """A task whose approval is still to be asked (it waits in `input_required` for the
        answer, as for a script's question) or was declined (it ends with the tool error,
        unrun; ledgered `refused`, saying what the user said)."""
        outcome = approval.outcome
        assert outcome is not None
        if outcome.questions:
            return await self._park(item, outcome, _Ended("ok", 0.0))
        shaped = await asyncio.to_thread(
            self.shaper.shape, self.tools.view(tool), outcome, item.version
        )
        ended = _Ended("refused", 0.0, 0, approval.verdict or "approval declined")
        return await self._settle(item, "completed", ended, result=shaped)

    async def _park(self, item: TaskItem, outcome: ToolOutcome, ended: _Ended) -> str:
        """The run asked: the task waits in `input_required` (still counted as running) and
        runs again once tasks/update has answered every question."""
        inputs = {q.key: {"method": q.method, "params": dict(q.params)} for q in outcome.questions}
        if ended.run_s:
            await self._charge(item, ended.run_s)
        parked = await asyncio.to_thread(
            self.store.park, item, inputs, dict(item.answers or {}), now=self.now_iso()
        )
        if not parked:
            found = await asyncio.to_thread(self.store.get, item.owner, item.task_id)
            return found.status if found else "missing"
        return "input_required"

    def _ran(self, began: list[float]) -> float:
        return max(0.0, self.clock() - began[0])

    async def _watch(
        self, item: TaskItem, run: asyncio.Task[Any], cancelled: asyncio.Event | None
    ) -> bool:
        """Wait for the run, renewing the lease; False (run stopped) when it was cancelled."""
        waiter = asyncio.ensure_future(cancelled.wait()) if cancelled else None
        try:
            while not run.done():
                pending: set[asyncio.Future[Any]] = {run}
                if waiter is not None:
                    pending.add(waiter)
                await asyncio.wait(
                    pending, timeout=self.settings.heartbeat_s, return_when="FIRST_COMPLETED"
                )
                if run.done():
                    break
                if (waiter is not None and waiter.done()) or not await self._renew(item):
                    run.cancel()  # the runner kills the process tree before this resolves
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await run
                    log.info("task %s cancelled; its run was stopped", item.task_id)
                    return False
            return True
        finally:
            if waiter is not None:
                waiter.cancel()

    async def _renew(self, item: TaskItem) -> bool:
        lease = self.clock() + self.settings.lease_s
        return await asyncio.to_thread(self.store.renew, item, lease_until=lease)

    async def _fail(self, item: TaskItem, message: str, *, ran_s: float = 0.0) -> str:
        ended = _Ended("tool_error", ran_s, 0, "task: " + message.partition(";")[0])
        return await self._settle(item, "failed", ended, error=internal_error(message))

    async def _settle(
        self,
        item: TaskItem,
        status: str,
        ended: _Ended,
        *,
        result: Mapping[str, Any] | None = None,
        error: Mapping[str, Any] | None = None,
    ) -> str:
        message = str(error["message"]) if error is not None else None
        ticket = self._ticket(item)
        ledger = None
        if ticket is not None and self.gate is not None:
            ledger = self.gate.entry_item(
                ticket, ended.outcome, duration_ms=ended.run_s * 1000,
                output_bytes=ended.output_bytes, detail=ended.detail,
            )  # fmt: skip
        # Charged before the task is seen to end, so a call its caller makes after seeing it
        # end is admitted against the day's seconds with this run's in.
        await self._charge(item, ended.run_s)
        done = await asyncio.to_thread(
            self.store.settle,
            item,
            status,
            now=self.now_iso(),
            message=message,
            result=result,
            error=error,
            ledger=ledger,
        )
        if not done:  # cancelled (or failed by a reader) while the result was on its way
            found = await asyncio.to_thread(self.store.get, item.owner, item.task_id)
            return found.status if found else "missing"
        return status

    def _ticket(self, item: TaskItem) -> CallTicket | None:
        return CallTicket.from_json(item.call) if item.call is not None else None

    async def _charge(self, item: TaskItem, run_s: float) -> None:
        """Charge a run's seconds to its caller's daily quotas (a failed charge is logged: the
        task's outcome stands)."""
        ticket = self._ticket(item)
        if ticket is None or self.gate is None or not ticket.charge:
            return
        try:
            await asyncio.to_thread(self.gate.charge, ticket, run_s)
        except Exception:
            log.exception("task %s: its run-seconds could not be charged", item.task_id)


@dataclass(frozen=True)
class _Ended:
    """How a task's run ended, as its ledger entry says it."""

    outcome: Outcome
    run_s: float
    output_bytes: int = 0
    detail: str = "task"

    @classmethod
    def of(cls, outcome: ToolOutcome, result: Any, elapsed_s: float) -> _Ended:
        """As for a plain call (`CatalogBackend.call_tool`): the runner's measure when the
        tool ran, else the time it took not to."""
        if result is None:  # it never started: no run time (as for a plain call)
            return cls(outcome_of(outcome.is_error, False, outcome.not_ready), 0.0)
        size = len(str(result.stdout).encode("utf-8", "replace"))
        kind = outcome_of(outcome.is_error, bool(result.timed_out))
        return cls(kind, float(result.duration_s), size)

    def approved(self, item: TaskItem, approval: Approval | None) -> _Ended:
        """A run its user approved first: the entry says by whom and when."""
        if approval is None:
            return self
        who = (item.confirm or {}).get("caller", "anonymous")
        return replace(self, detail=f"task; approved by {who} at {approval.at}")

    def as_error(self) -> _Ended:
        """The same run, ended as an error for its caller (a run that succeeded is not `ok`)."""
        return self if self.outcome != "ok" else replace(self, outcome="tool_error")


def _approval(item: TaskItem, tool: Tool) -> Approval | None:
    """What the task's view or key require before it runs, and what its user said so far."""
    talk = Conversation(item.answers or {}, ASKABLE)
    return approval_for(Requirement.from_json(item.confirm), tool, item.arguments, talk)


def handle_event(
    event: Any,
    context: Any,
    worker: TaskWorker,
    webhook: Callable[[str], Coroutine[Any, Any, bool]] | None = None,
) -> dict[str, Any]:
    """The worker function's invocation: `{"kiln_task": {"owner": ..., "id": ...}}`, or
    `{"kiln_approval": {"webhook": <approval id>}}` (deliver that approval's webhook)."""
    notice = event.get("kiln_approval") if isinstance(event, dict) else None
    if isinstance(notice, dict) and isinstance(notice.get("webhook"), str) and webhook:
        delivered = asyncio.run(webhook(notice["webhook"]))
        return {"approval": notice["webhook"], "delivered": delivered}
    body = event.get("kiln_task") if isinstance(event, dict) else None
    owner = body.get("owner") if isinstance(body, dict) else None
    task_id = body.get("id") if isinstance(body, dict) else None
    if not isinstance(owner, str) or not isinstance(task_id, str):
        raise ValueError('a worker event is {"kiln_task": {"owner": <string>, "id": <string>}}')
    left = context.get_remaining_time_in_millis() / 1000 if context is not None else None
    status = asyncio.run(worker.run(owner, task_id, time_left_s=left))
    log.info("task %s ended as %s", task_id, status)
    return {"task": task_id, "status": status}
