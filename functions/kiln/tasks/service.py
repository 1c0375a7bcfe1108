"""The `TaskBackend` of the MCP endpoint: stores tasks, starts their runs, answers lookups.

Where a run happens is a `Starter`: `LocalPool` runs it in this process (kiln dev, tests),
`LambdaStarter` invokes the worker function asynchronously (AWS). The record is stored
before the run is started, so a `tasks/get` right after the create always finds it.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import logging
import re
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

from kiln.access.approvals import Requirement
from kiln.access.waiting import waiting_message, waiting_meta
from kiln.accounting.gate import CallGate, CallTicket
from kiln.accounting.ledger import Outcome
from kiln.aws.clients import CALLER_ROLE
from kiln.catalog.model import Tool
from kiln.protocol.backend import (
    CallContext,
    TaskAnswerError,
    TaskCursorError,
    TaskRecord,
    TaskRefusedError,
    ToolView,
)
from kiln.serving.backend import AdmittedTask
from kiln.serving.store_errors import catalog_reads
from kiln.tasks.settings import TaskSettings
from kiln.tasks.store import (
    TaskCaller,
    TaskItem,
    TaskLimitError,
    TaskStore,
    TaskTooLargeError,
    owner_key,
)
from kiln.tasks.worker import TaskWorker, internal_error

if TYPE_CHECKING:
    from mypy_boto3_lambda import LambdaClient

    from kiln.tasks.approving import ApprovalTasks

log = logging.getLogger("kiln.tasks")
ANONYMOUS = "anonymous"
_CURSOR = re.compile(r"[A-Za-z0-9_-]{1,128}")
LEASE_LOST = (
    "The worker running this task stopped without reporting back (its lease ran out); "
    "the run's outcome is unknown. Call the tool again."
)


def iso(epoch: float) -> str:
    moment = datetime.fromtimestamp(epoch, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _acts_for(tool: Tool, ctx: CallContext) -> dict[str, Any] | None:
    """For a tool acting for its caller (`connections`): who, for the worker's run."""
    caller = TaskCaller.of(ctx.principal) if tool.head.connections else None
    return caller.as_json(ctx.arrival.base_url) if caller is not None else None


def principal_label(ctx: CallContext) -> str:
    """Who owns the tasks this caller creates: the API key or token subject; an anonymous
    caller by its network address, so that one anonymous caller's working tasks (at most
    `max_running_per_principal`) leave the others theirs."""
    label = getattr(ctx.principal, "label", None)
    if isinstance(label, str) and label != ANONYMOUS:
        return label
    address = ctx.arrival.client_address
    return f"{ANONYMOUS}@{address}" if address else ANONYMOUS


class ApprovalImpossibleError(TaskRefusedError):
    """The task's tool needs the user's approval and its client cannot give it."""

    detail = "approval not possible: the client cannot be asked"


def approval_asked(
    tool: Tool, required: Requirement | None, ctx: CallContext
) -> dict[str, Any] | None:
    """What the task record keeps of the approval its run needs first (None: none). Its
    question is the task's `input_required` state, answered with tasks/update (2026-07-28 and
    the tasks extension); a client that declared no elicitation, or a 2025-11-25 task, which
    has no way to answer, is refused before the task is made."""
    if required is None:
        return None
    turn = ctx.turn
    if turn is None or not turn.modern or "elicitation" not in turn.can_ask:
        raise ApprovalImpossibleError(
            f"Tool {tool.name!r} was not run: {required.source} requires the user's approval "
            f"first (confirm: {required.policy}), and this task's client cannot be asked: a "
            "task asks through tasks/update, on MCP 2026-07-28 with the tasks extension, and "
            "the call must declare the elicitation capability."
        )
    caller = getattr(ctx.principal, "label", None) or ANONYMOUS
    return {**required.as_json(), "caller": caller}


class TaskTools(Protocol):
    async def admit_task(
        self, tool: ToolView, arguments: Mapping[str, Any], ctx: CallContext
    ) -> AdmittedTask | None:
        """The tool the task will run, its call's ledger ticket (None: not ledgered) and the
        approval it needs; None when it is no longer callable. May raise a ProtocolError
        (RateLimitedError)."""
        ...


class Starter(Protocol):
    def busy(self) -> bool:
        """True when this process takes no more runs now."""
        ...

    async def start(self, owner: str, task_id: str) -> None:
        """Have the task run somewhere; raises when it cannot be handed over."""
        ...

    def cancelled(self, task_id: str) -> None:
        """A hint that the task was cancelled (the worker also finds out by itself)."""
        ...

    async def close(self) -> None:
        """Stop the runs this process holds (at shutdown)."""
        ...


class LocalPool:
    """Runs tasks in this process's event loop, at most `max_running` at once."""

    def __init__(self, worker: TaskWorker, *, max_running: int, runner_slots: int = 4) -> None:
        self._worker = worker
        self._max_running = max_running
        # Task runs take at most all but one of the runner's slots, so calls made inside
        # requests are never queued behind long tasks alone; the other tasks wait their turn
        # here, with their leases kept (never refused as "busy" by the runner's queue).
        self._slot = asyncio.Semaphore(max(1, runner_slots - 1))
        self._runs: dict[str, tuple[asyncio.Task[str], asyncio.Event]] = {}

    def busy(self) -> bool:
        return len(self._runs) >= self._max_running

    @property
    def running(self) -> int:
        return len(self._runs)

    async def start(self, owner: str, task_id: str) -> None:
        event = asyncio.Event()
        context = contextvars.copy_context()
        context.run(CALLER_ROLE.set, "worker")  # in AWS the worker function runs it
        run = asyncio.create_task(
            self._worker.run(owner, task_id, cancelled=event, slot=self._slot), context=context
        )
        self._runs[task_id] = (run, event)
        run.add_done_callback(lambda done: self._finished(task_id, done))

    def _finished(self, task_id: str, run: asyncio.Task[str]) -> None:
        self._runs.pop(task_id, None)
        if not run.cancelled() and run.exception() is not None:
            # The task stays working; its lease runs out and the next reader fails it.
            log.error("task %s: its worker failed", task_id, exc_info=run.exception())

    def cancelled(self, task_id: str) -> None:
        found = self._runs.get(task_id)
        if found is not None:
            found[1].set()

    async def close(self) -> None:
        """Stop every run (their process trees are killed); their tasks' leases run out."""
        runs = [run for run, _ in self._runs.values()]
        for run in runs:
            run.cancel()
        for run in runs:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await run


class LambdaStarter:
    """Invokes the worker function asynchronously with the task's key."""

    def __init__(self, lambda_client: LambdaClient, function: str) -> None:
        self._client = lambda_client
        self._function = function

    def busy(self) -> bool:
        return False  # the worker function's reserved concurrency bounds AWS-side runs

    async def start(self, owner: str, task_id: str) -> None:
        payload = json.dumps({"kiln_task": {"owner": owner, "id": task_id}}).encode()
        await asyncio.to_thread(
            self._client.invoke,
            FunctionName=self._function,
            InvocationType="Event",
            Payload=payload,
        )

    async def announce(self, waiting: Any) -> None:
        """Have the worker function deliver the webhook of a new waiting approval."""
        payload = json.dumps({"kiln_approval": {"webhook": waiting.id}}).encode()
        await asyncio.to_thread(
            self._client.invoke,
            FunctionName=self._function,
            InvocationType="Event",
            Payload=payload,
        )

    def cancelled(self, task_id: str) -> None:
        return None

    async def close(self) -> None:
        return None  # the worker function's runs are not this process's


@dataclass(eq=False)
class TaskService:
    store: TaskStore
    starter: Starter
    settings: TaskSettings
    tools: TaskTools
    _: KW_ONLY
    gate: CallGate | None = None
    clock: Callable[[], float] = time.time
    # Calls that wait for a person's approval (kiln.tasks.approving); None: no such calls.
    waiting: ApprovalTasks | None = None

    async def close(self) -> None:
        """Stop this process's task runs; their tasks end `failed`, saying why."""
        if self.waiting is not None:
            await self.waiting.close()
        await self.starter.close()

    def _ttl_ms(self, requested: int | None, run_s: float) -> int:
        """The ttl a task gets: the one asked for, within the maximum, but never less than
        its tool's run can take (its timeout, the worker's start grace) plus a minute to read
        the result. `ttlMs` in the answer says which it is."""
        floor = int((run_s + self.settings.start_grace_s + 60) * 1000)
        wanted = requested if requested is not None else self.settings.ttl_ms
        return max(floor, min(wanted, self.settings.max_ttl_ms))

    @catalog_reads  # a store that does not answer: -32000 "unavailable", as for a plain call
    async def create_task(
        self,
        tool: ToolView,
        arguments: Mapping[str, Any],
        ctx: CallContext,
        *,
        version: str,
        ttl_ms: int | None,
        answers: Mapping[str, Any] | None = None,
        again: bool = False,
    ) -> TaskRecord:
        waiting = self.waiting if tool.waits_for else None  # a person approves it first
        if tool.waits_for and waiting is None:
            raise TaskRefusedError(f"Tool {tool.name!r} needs a person's approval, and this "
                                   "server keeps no approvals; ask its operator.")  # fmt: skip
        if waiting is not None and again:
            found_again = await waiting.again(tool, arguments, ctx)
            if found_again is not None:
                return found_again
        admitted = await self.tools.admit_task(tool, arguments, ctx)
        if admitted is None:
            raise TaskRefusedError(f"Tool {tool.name!r} was disabled or removed; list tools again.")
        found, ticket, required = admitted
        try:
            if waiting is not None:  # kiln.tasks.approving: stored, started once approved
                waits = waiting.prepare(tool, ctx)
                wait_s = max(1.0, float(waits["deadline"]) - self.clock())
                record = await self._create(found, ticket, arguments, ctx, version, ttl_ms,
                                            None, waits, wait_s=wait_s)  # fmt: skip
                await waiting.created(found, ticket, arguments, ctx, record, waits, again=again)
                return record
            confirm = approval_asked(found, required, ctx)
            return await self._create(
                found, ticket, arguments, ctx, version, ttl_ms, answers, confirm
            )
        except TaskRefusedError as refusal:
            # Answered like a plain call whose tool could not start: ledgered as a tool error,
            # or refused when its approval cannot be asked.
            if ticket is not None and self.gate is not None:
                kind: Outcome = (
                    "refused" if isinstance(refusal, ApprovalImpossibleError) else ("tool_error")
                )
                detail = getattr(refusal, "detail", None) or f"task not started: {refusal}"
                await asyncio.to_thread(self.gate.record_ticket, ticket, kind, detail=detail)
            raise

    async def _create(
        self,
        found: Tool,
        ticket: CallTicket | None,
        arguments: Mapping[str, Any],
        ctx: CallContext,
        version: str,
        ttl_ms: int | None,
        answers: Mapping[str, Any] | None = None,
        confirm: Mapping[str, Any] | None = None,
        *,
        wait_s: float = 0.0,
    ) -> TaskRecord:
        """Store the task; start it unless it waits `wait_s` for a person's approval first
        (its lease runs until then: kiln.tasks.approving)."""
        if self.starter.busy() and not wait_s:
            raise TaskRefusedError(
                f"Kiln is running as many tasks as it may ({self.settings.max_running_per_process}"
                "); try again when one has ended"
            )
        now = self.clock()
        ttl = self._ttl_ms(ttl_ms, float(found.head.timeout_seconds) + wait_s)
        item = TaskItem(
            owner=owner_key(principal_label(ctx)),
            task_id=secrets.token_urlsafe(32),  # 256 random bits: the id is a capability
            tool=found.name,
            revision=found.head.number,
            version=version,
            arguments=dict(arguments),
            status="working",
            created_at=iso(now),
            updated_at=iso(now),
            ttl_ms=ttl,
            poll_interval_ms=self.settings.poll_interval_ms,
            expires_at=now + ttl / 1000,
            lease_until=now + (wait_s or self.settings.start_grace_s),
            call=ticket.as_json() if ticket is not None else None,
            answers=dict(answers) if answers else None,
            confirm=confirm,
            acts_for=_acts_for(found, ctx),
        )
        cap = self.settings.max_running_per_principal
        try:
            await asyncio.to_thread(self.store.create, item, max_running=cap)
        except TaskTooLargeError as error:
            raise TaskRefusedError(
                f"Tool {found.name!r} was not started as a task: {error}"
            ) from error
        except TaskLimitError as error:
            raise TaskRefusedError(
                f"Too many running tasks: this caller already has {cap} working, the limit; "
                "wait for one to end or cancel one (tasks/cancel)"
            ) from error
        if wait_s:
            return self._record(item)
        return await self._start(item)

    async def record_of(self, owner: str, task_id: str) -> TaskRecord | None:
        item = await self._get(owner, task_id)
        return self._record(item) if item is not None else None

    async def start_stored(self, item: TaskItem) -> TaskRecord:
        return await self._start(item)

    async def _start(self, item: TaskItem) -> TaskRecord:
        """Start a stored task's run; one whose worker cannot start ends `failed`, saying so."""
        try:
            await self.starter.start(item.owner, item.task_id)
        except Exception:
            log.exception("task %s: could not start its worker", item.task_id)
            message = "Internal error: the task's worker could not be started"
            await self._fail(item, message, "task: its worker could not be started")
            return self._record(await self._get(item.owner, item.task_id) or item)
        return self._record(item)

    async def _fail(
        self, item: TaskItem, message: str, detail: str, *, lease_seen: float | None = None
    ) -> None:
        """End a task `failed` here, not by its worker: `message` said as an internal error,
        ledgered as a tool error with `detail`."""
        await asyncio.to_thread(
            self.store.settle,
            item,
            "failed",
            now=iso(self.clock()),
            message=message,
            error=internal_error(message),
            lease_seen=lease_seen,
            ledger=self._entry(item, "tool_error", detail),
        )

    def ledger_item(self, item: TaskItem, outcome: Outcome, detail: str) -> dict[str, Any] | None:
        return self._entry(item, outcome, detail)

    def _entry(self, item: TaskItem, outcome: Outcome, detail: str) -> dict[str, Any] | None:
        """The ledger item of a task's call ended here, not by its worker (no run-seconds
        known: its duration is the time since the call)."""
        ticket = CallTicket.from_json(item.call) if item.call is not None else None
        if ticket is None or self.gate is None:
            return None
        elapsed_ms = (self.clock() - ticket.started) * 1000
        return self.gate.entry_item(ticket, outcome, duration_ms=elapsed_ms, detail=detail)

    async def _get(self, owner: str, task_id: str) -> TaskItem | None:
        item = await asyncio.to_thread(self.store.get, owner, task_id)
        if item is not None and item.status == "working" and item.lease_until < self.clock():
            if self.waiting is not None and await self.waiting.expire_task(item):
                return await asyncio.to_thread(self.store.get, owner, task_id)
            await self._fail(
                item, LEASE_LOST, "task: its worker was lost", lease_seen=item.lease_until
            )
            item = await asyncio.to_thread(self.store.get, owner, task_id)
        return item

    async def get_task(self, task_id: str, ctx: CallContext) -> TaskRecord | None:
        item = await self._get(owner_key(principal_label(ctx)), task_id)
        return self._record(item) if item is not None else None

    async def cancel_task(self, task_id: str, ctx: CallContext) -> TaskRecord | None:
        owner = owner_key(principal_label(ctx))
        item = await self._get(owner, task_id)
        if item is None:
            return None
        if item.status in ("working", "input_required"):
            await asyncio.to_thread(
                self.store.settle,
                item,
                "cancelled",
                now=iso(self.clock()),
                message="The task was cancelled by request.",
                ledger=self._entry(item, "cancelled", "task cancelled"),
            )
            self.starter.cancelled(task_id)
            item = await self._get(owner, task_id) or item
        return self._record(item)

    async def update_task(
        self, task_id: str, responses: Mapping[str, Any], ctx: CallContext
    ) -> TaskRecord | None:
        from kiln.protocol.talking import answer_problem

        owner = owner_key(principal_label(ctx))
        item = await self._get(owner, task_id)
        if item is None or item.status != "input_required":
            return self._record(item) if item is not None else None
        pending = dict(item.inputs or {})
        answered = {key: responses[key] for key in pending if key in responses}
        for key, answer in answered.items():
            problem = answer_problem(key, str(pending[key].get("method")), answer)
            if problem:
                raise TaskAnswerError(problem)
        if not answered:
            return self._record(item)
        still = {key: request for key, request in pending.items() if key not in answered}
        answers = {**(item.answers or {}), **answered}
        lease = self.clock() + self.settings.start_grace_s
        moved = await asyncio.to_thread(
            self.store.answer, item, still, answers, now=iso(self.clock()), lease_until=lease
        )
        if moved and not still:
            try:
                await self.starter.start(owner, task_id)
            except Exception:
                log.exception("task %s: could not restart its worker", task_id)
        return self._record(await self._get(owner, task_id) or item)

    async def list_tasks(
        self, ctx: CallContext, cursor: str | None
    ) -> tuple[Sequence[TaskRecord], str | None]:
        if cursor is not None and not _CURSOR.fullmatch(cursor):
            raise TaskCursorError(cursor)
        label = principal_label(ctx)
        if label == ANONYMOUS:
            # Anonymous tasks are bound to no one: the id is their only key, never a listing.
            return [], None
        items, after = await asyncio.to_thread(self.store.page, owner_key(label), cursor)
        return [self._record(i) for i in items], after

    @staticmethod
    def _record(item: TaskItem) -> TaskRecord:
        meta = waiting_meta(item.confirm)
        message = item.status_message
        if meta is not None and message is None and item.status == "working":
            message = waiting_message(item.confirm or {})
        return TaskRecord(
            task_id=item.task_id,
            status=item.status,  # type: ignore[arg-type]
            created_at=item.created_at,
            last_updated_at=item.updated_at,
            ttl_ms=item.ttl_ms,
            poll_interval_ms=item.poll_interval_ms,
            status_message=message,
            result=item.result,
            error=item.error,
            input_requests=item.inputs if item.status == "input_required" else None,
            meta=meta,
        )
