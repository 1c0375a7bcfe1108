"""Calls that wait for a person's approval, as tasks (the policy is kiln.access.waiting).

Such a call is stored as a `working` task that is not started: its lease runs until the
approval's deadline, its status message says who must approve, and its `_meta` carries
`kiln/approval` (id, approvers, expiresAt, state). An approver decides it:

- approve: the approval moves pending -> approved (one conditional update: a second approve,
  a replay, another approver too late, all find it decided and are refused); the policy is
  checked again first (the caller's key still valid, the tool still at the revision the call
  was made against, the caller's quota not spent); then the task is started, and its worker
  runs it only after moving the approval approved -> running (kiln.access.approval_store), so
  the run happens once whatever starts the worker twice.
- deny, or the deadline passing (seen by whoever reads it next): the task ends `completed`
  with an `isError` result saying why, unrun; its call is ledgered `refused`.

Every decision is in the audit log (`kiln.audit`: approval.approve|deny|expire|refuse) and
the call's ledger entry (`task; approved by <approver> at <time>`, or the refusal).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import KW_ONLY, dataclass, field
from typing import TYPE_CHECKING, Any

from kiln.access.approval_store import ApprovalStore, State, Waiting, iso
from kiln.access.waiting import approver_name, refusal
from kiln.access.webhook import Webhook
from kiln.accounting.gate import CallTicket
from kiln.catalog.model import Tool
from kiln.errors import KilnError, NotFound
from kiln.protocol.backend import CallContext, TaskRecord, ToolView
from kiln.protocol.calling import tool_error

if TYPE_CHECKING:
    from kiln.identity.keys import KeyStore
    from kiln.tasks.service import TaskService
    from kiln.tasks.store import TaskItem

log = logging.getLogger("kiln.approvals")
CALL_PREFIX = "APPROVAL#CALL#"  # a caller's waiting call, by tool and arguments


class ApprovalDecisionError(KilnError):
    """A decision refused; the message says why, each kind carries its answer."""


class ApprovalNotFoundError(ApprovalDecisionError, NotFound):
    """No such approval, or none the asker is an approver of."""


class NotAnApproverError(ApprovalDecisionError, status=403, rest_code="not_an_approver"):
    """The asker may not decide it (not listed, the caller themself, not an author key)."""


class ApprovalDecidedError(ApprovalDecisionError, status=409, rest_code="already_decided"):
    """It was decided already, or expired (a replayed decision is one of these)."""


def _digest(tool: str, arguments: Mapping[str, Any]) -> str:
    text = json.dumps(arguments, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(f"{tool}\0{text}".encode()).hexdigest()[:40]


@dataclass(eq=False)
class ApprovalTasks:
    service: TaskService
    store: ApprovalStore
    _: KW_ONLY
    keys: KeyStore | None = None
    head_of: Callable[[str], Awaitable[int | None]] | None = None  # a tool's head revision
    webhook: Webhook | None = None
    notify: Callable[[Waiting], Awaitable[None]] | None = None  # hands the webhook to a worker
    base_url: str = ""  # how approvers reach this server (KILN_PUBLIC_BASE_URL), for links
    # one audit line per decision (kiln.identity.audit.record_write, handed in by the stack)
    audit: Callable[..., Any] | None = None
    _sending: set[asyncio.Task[Any]] = field(default_factory=set, init=False)

    # ------------------------------------------------------------------ a call waits

    async def again(
        self, tool: ToolView, arguments: Mapping[str, Any], ctx: CallContext
    ) -> TaskRecord | None:
        """The caller's same call still kept (a client without tasks calling again), or None."""
        return await self._again(*self._pointer(tool.name, arguments, ctx))

    def prepare(self, tool: ToolView, ctx: CallContext) -> dict[str, Any]:
        """What the task record keeps of the approval its call waits for (its `confirm`)."""
        return {
            "approval": self.store.new_id(),
            "approvers": list(tool.waits_for),
            "caller": getattr(ctx.principal, "label", None) or "anonymous",
            "deadline": self.service.clock() + self.service.settings.approval_expiry_s,
        }

    async def created(
        self,
        found: Tool,
        ticket: CallTicket | None,
        arguments: Mapping[str, Any],
        ctx: CallContext,
        record: TaskRecord,
        confirm: Mapping[str, Any],
        *,
        again: bool,
    ) -> None:
        """The task is stored: its approval is stored, remembered for the same call again (a
        client without tasks), and announced (the webhook)."""
        owner, digest = self._pointer(found.name, arguments, ctx)
        head = await self.head_of(found.name) if self.head_of else None
        waiting = Waiting(
            id=confirm["approval"], state="pending", tool=found.name,
            revision=found.head.number, head=head or found.head.number,
            arguments=dict(arguments), caller=str(confirm["caller"]),
            view=ticket.view if ticket is not None else None,
            approvers=tuple(confirm["approvers"]), owner=owner, task_id=record.task_id,
            created_at=self.service.clock(), deadline=float(confirm["deadline"]),
            key_id=getattr(ctx.principal, "key_id", None),
        )  # fmt: skip
        await asyncio.to_thread(self.store.create, waiting)
        if again:
            await asyncio.to_thread(self._remember, owner, digest, record.task_id, waiting.deadline)
        await self._announce(waiting)

    @staticmethod
    def _pointer(name: str, arguments: Mapping[str, Any], ctx: CallContext) -> tuple[str, str]:
        from kiln.tasks.service import principal_label
        from kiln.tasks.store import owner_key

        return owner_key(principal_label(ctx)), _digest(name, arguments)

    async def _again(self, owner: str, digest: str) -> TaskRecord | None:
        """The caller's same call, still kept (a client without tasks calling again)."""
        raw = await asyncio.to_thread(
            self.store.ddb.get_item,
            TableName=self.store.table,
            Key={"pk": {"S": CALL_PREFIX + owner}, "sk": {"S": digest}},
            ConsistentRead=True,
        )
        item = raw.get("Item")
        if item is None or "answered" in item:
            return None
        record = await self.service.record_of(owner, item["task"]["S"])
        if record is not None and record.terminal:  # answered once: the next call is new
            await asyncio.to_thread(
                self.store.ddb.update_item,
                TableName=self.store.table,
                Key={"pk": {"S": CALL_PREFIX + owner}, "sk": {"S": digest}},
                UpdateExpression="SET answered = :t",
                ExpressionAttributeValues={":t": {"BOOL": True}},
            )
        return record

    def _remember(self, owner: str, digest: str, task_id: str, deadline: float) -> None:
        self.store.ddb.put_item(
            TableName=self.store.table,
            Item={
                "pk": {"S": CALL_PREFIX + owner},
                "sk": {"S": digest},
                "task": {"S": task_id},
                "expires_at": {"N": str(int(deadline + 86_400))},
            },
        )

    async def _announce(self, waiting: Waiting) -> None:
        """Tell the webhook without holding the call's answer for its retries: in AWS by an
        asynchronous invoke of the worker function (`notify`: a frozen container finishes no
        background work), elsewhere in the background of this process."""
        if self.webhook is None:
            return
        if self.notify is not None:
            try:
                await self.notify(waiting)
            except Exception:  # the call waits all the same: approvers still see it listed
                log.exception("approval %s: the webhook could not be handed over", waiting.id)
            return
        sending = asyncio.ensure_future(self.send(waiting))
        self._sending.add(sending)
        sending.add_done_callback(self._sending.discard)

    async def deliver(self, approval_id: str) -> bool:
        """The worker function's part: deliver the webhook of this approval (retried)."""
        waiting = await asyncio.to_thread(self.store.get, approval_id)
        return waiting is not None and await self.send(waiting)

    async def send(self, waiting: Waiting) -> bool:
        """Deliver the webhook of a new approval (here, or in the worker function)."""
        if self.webhook is None:
            return False
        api = f"{self.base_url}/api/approvals/{waiting.id}"
        links = {"inbox": f"{self.base_url}/studio/#/approvals", "approve": f"{api}/approve",
                 "deny": f"{api}/deny"}  # fmt: skip
        data = {**waiting.public(), "links": links}
        return await self.webhook.deliver(f"msg_{waiting.id}", data)

    async def close(self) -> None:
        for sending in list(self._sending):
            sending.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await sending

    # ------------------------------------------------------------------ approvers

    async def pending_for(self, principal: Any) -> list[dict[str, Any]]:
        """The approvals `principal` is an approver of, newest first, expired ones ended."""
        name = approver_name(principal)
        shown = []
        for waiting in await asyncio.to_thread(self.store.listed):
            if name is None or name not in waiting.approvers:
                continue
            waiting = await self._expired(waiting)
            why = refusal(waiting.approvers, waiting.caller, principal)
            shown.append({**waiting.public(), "can_decide": why is None, "why_not": why})
        return shown

    async def show(self, approval_id: str, principal: Any) -> dict[str, Any]:
        waiting = await self._listed_for(approval_id, principal)
        why = refusal(waiting.approvers, waiting.caller, principal)
        return {**waiting.public(), "can_decide": why is None, "why_not": why}

    async def _listed_for(self, approval_id: str, principal: Any) -> Waiting:
        waiting = await asyncio.to_thread(self.store.get, approval_id)
        name = approver_name(principal)
        if waiting is None or name is None or name not in waiting.approvers:
            raise ApprovalNotFoundError(f"no approval {approval_id!r} waits for you")
        return await self._expired(waiting)

    async def approve(self, approval_id: str, principal: Any) -> dict[str, Any]:
        waiting = await self._decidable(approval_id, principal, "approve")
        problem = await self._gone(waiting) or await self._recheck(waiting)
        who = approver_name(principal) or "?"
        if problem is not None:
            await self._end(waiting, "denied", "kiln", problem)
            self._audit(principal, "approval.refuse", waiting, reason=problem)
            raise ApprovalDecidedError(f"approval {approval_id} was not given: {problem}")
        moved = await asyncio.to_thread(self.store.decide, approval_id, "approved", by=who)
        if not moved.done:
            raise ApprovalDecidedError(self._decided(moved.approval, approval_id))
        approved = moved.approval
        assert approved is not None
        self._audit(principal, "approval.approve", approved)
        await self._start_approved(approved.owner, approved.task_id, by=who)
        return approved.public()

    async def deny(self, approval_id: str, principal: Any, reason: str | None) -> dict[str, Any]:
        waiting = await self._decidable(approval_id, principal, "deny")
        who = approver_name(principal) or "?"
        ended = await self._end(waiting, "denied", who, reason)
        if ended is None:
            raise ApprovalDecidedError(self._decided(waiting, approval_id))
        self._audit(principal, "approval.deny", ended, reason=reason)
        return ended.public()

    async def _decidable(self, approval_id: str, principal: Any, what: str) -> Waiting:
        waiting = await asyncio.to_thread(self.store.get, approval_id)
        if waiting is None:
            raise ApprovalNotFoundError(f"no approval {approval_id!r} waits for you")
        why = refusal(waiting.approvers, waiting.caller, principal)
        if why is not None:
            self._audit(principal, "approval.refuse", waiting, reason=why, tried=what)
            raise NotAnApproverError(f"you may not {what} approval {approval_id}: {why}")
        waiting = await self._expired(waiting)
        if waiting.state != "pending":
            raise ApprovalDecidedError(self._decided(waiting, approval_id))
        return waiting

    @staticmethod
    def _decided(waiting: Waiting | None, approval_id: str) -> str:
        if waiting is None:
            return f"approval {approval_id} is gone"
        if waiting.state == "expired":
            return f"approval {approval_id} expired at {iso(waiting.deadline)}, undecided"
        at = iso(waiting.decided_at) if waiting.decided_at else "?"
        verb = "denied" if waiting.state == "denied" else "approved"
        return f"approval {approval_id} was already {verb} by {waiting.decided_by} at {at}"

    async def _gone(self, waiting: Waiting) -> str | None:
        """Why the call no longer waits though its approval does (its caller cancelled it)."""
        item = await asyncio.to_thread(self.service.store.get, waiting.owner, waiting.task_id)
        if item is None or item.status != "working":
            return "its caller cancelled the call, or it has ended"
        return None

    async def _recheck(self, waiting: Waiting) -> str | None:
        """Why the call may no longer run (None: it may): the policy as it is now."""
        if waiting.caller.startswith("key:") and self.keys is not None and waiting.key_id:
            name = waiting.caller[len("key:") :]
            records = await asyncio.to_thread(self.keys.list)
            record = next((r for r in records if r.name == name), None)
            if record is None or record.revoked or record.key_id != waiting.key_id:
                return f"the caller's key {name!r} was revoked since the call"
            if not record.quota.empty and self.service.gate is not None:
                limits = ((f"key:{record.key_id}", record.quota),)
                try:  # the day's run-seconds left (a new minute window, if full, waits)
                    await asyncio.to_thread(self.service.gate.admit, limits)
                except Exception as error:
                    return f"the caller's quota is spent ({error})"
                await asyncio.to_thread(self.service.gate.release, limits)
        if self.head_of is not None:
            head = await self.head_of(waiting.tool)
            if head is None:
                return f"tool {waiting.tool!r} was removed or disabled since the call"
            if head != waiting.head:
                return (
                    f"tool {waiting.tool!r} changed since the call (revision {waiting.head}, "
                    f"now {head}): the caller must call it again"
                )
        return None

    # ------------------------------------------------------------------ endings

    async def _expired(self, waiting: Waiting) -> Waiting:
        """A pending approval past its deadline, ended (once, by whoever sees it first)."""
        if waiting.state != "pending" or waiting.deadline > self.service.clock():
            return waiting
        ended = await self._end(waiting, "expired", "kiln", None)
        if ended is not None:
            self._audit(None, "approval.expire", ended)
        return ended or (await asyncio.to_thread(self.store.get, waiting.id)) or waiting

    async def expire_task(self, item: TaskItem) -> bool:
        """A waiting task read past its lease: True when it was its approval that ran out."""
        approval_id = (item.confirm or {}).get("approval")
        if not approval_id:
            return False
        waiting = await asyncio.to_thread(self.store.get, str(approval_id))
        if waiting is None or waiting.state not in ("pending", "expired", "denied"):
            return False
        await self._expired(waiting)
        return True

    async def _end(
        self, waiting: Waiting, state: State, by: str, reason: str | None
    ) -> Waiting | None:
        """pending -> denied | expired, and the task ended unrun with an isError result."""
        moved = await asyncio.to_thread(
            self.store.decide,
            waiting.id,
            state,
            by=by,
            reason=reason,
        )
        if not moved.done or moved.approval is None:
            return None
        ended = moved.approval
        if state == "expired":
            text = (
                f"Tool {ended.tool!r} was not run: its approval expired at {iso(ended.deadline)}"
                f" before anyone ({', '.join(ended.approvers)}) approved it."
            )
            detail = "approval expired"
        elif by == "kiln":
            text = f"Tool {ended.tool!r} was not run: its approval was refused: {reason}."
            detail = f"approval refused: {reason}"
        else:
            text = f"Tool {ended.tool!r} was not run: {by} denied its approval" + (
                f": {reason}" if reason else "."
            )
            detail = f"approval denied by {by}" + (f": {reason}" if reason else "")
        await self._end_unrun(ended.owner, ended.task_id, tool_error(text), detail)
        return ended

    # ------------------------------------------------------------------ the task's side

    async def _start_approved(self, owner: str, task_id: str, *, by: str) -> None:
        """An approved task: its lease is its worker's start grace again, then it is started."""
        service = self.service
        item = await asyncio.to_thread(service.store.get, owner, task_id)
        if item is None or item.status != "working":
            return  # cancelled by its caller meanwhile: nothing runs
        now = service.clock()
        grace = now + service.settings.start_grace_s
        await asyncio.to_thread(service.store.renew, item, lease_until=grace)
        note = f"Approved by {by} at {iso(now)}; it runs now."
        await asyncio.to_thread(service.store.note, item, note, now=iso(now))
        await service.start_stored(item)

    async def _end_unrun(
        self, owner: str, task_id: str, result: Mapping[str, Any], detail: str
    ) -> None:
        """A waiting task whose approval was denied or expired: `completed`, with the isError
        `result`, unrun; its call ledgered `refused`."""
        service = self.service
        item = await asyncio.to_thread(service.store.get, owner, task_id)
        if item is None or item.status != "working":
            return
        now = iso(service.clock())
        text = str(result["content"][0]["text"])
        ledger = service.ledger_item(item, "refused", detail)
        await asyncio.to_thread(
            service.store.settle, item, "completed", now=now, message=text, result=result,
            ledger=ledger,
        )  # fmt: skip

    def _audit(self, principal: Any, action: str, waiting: Waiting, **details: Any) -> None:
        if self.audit is None:
            return
        self.audit(
            principal, action=action, tool_name=waiting.tool, revision=waiting.revision,
            approval=waiting.id, caller=waiting.caller,
            **{k: v for k, v in details.items() if v is not None},
        )  # fmt: skip
