"""Tools that call tools: a run's `call` asks, answered inside the call that ran it.

A script asks for a tool call as it asks the client a question (kiln/runner/TALKING.md,
"Calling tools"): it writes `{"ask": key, "call": {"name": ..., "arguments": {...}}}` and ends.
The conversation (talking.py) hands such asks here instead of to the client. Each one is a
`tools/call` of the named tool through the same ToolCaller as a direct call, as the same caller:
its view (a tool the caller cannot see is unknown), its quotas, the approvals its view or key
require, argument checks and the ledger, whose entry names the calling call's (`CallLink`). Its
result (a CallToolResult, shaped for the newest revision) becomes the answer under the
script's key, and the script runs again from the top with it.

What an inner call asks the client (the approval of a destructive tool, its script's own
questions) is asked through the outer call, its key under `kiln/call/<key>/`; the client's
answers come back with the outer call's next round and are handed down to the inner call,
which then runs with them. So a call that calls tools works on every wire a question works on,
and on Lambda: nothing waits between rounds.

A tool calls only the tools its revision declares (`calls`, pinned with the revision by a
view); code mode's `execute` may call every tool of its view. One call's whole tree of inner
calls shares bounds (`CallLimits`): how deep calls nest, how many there are, and how long they
take from the first one (never past the time the request has left). A call past a bound is
not made; its answer is an `isError` result that says which bound and the chain of calls, so
a tool that calls itself, directly or through others, ends at the depth bound.
"""

from __future__ import annotations

import asyncio
import hashlib
import secrets
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from kiln.protocol.backend import CallContext, Question, ToolView
from kiln.protocol.errors import ProtocolError, RequestId

if TYPE_CHECKING:
    from kiln.protocol.calling import ToolCaller
    from kiln.protocol.talking import Turn

CALL_METHOD = "tools/call"  # a run's call ask, as a Question's method
PREFIX = "kiln/call/"  # the keys of an inner call's questions, asked through its outer call
ANSWER_VERSION = "2026-07-28"  # inner results carry structuredContent whatever the wire
# A run given no more than this does not start (the runner keeps it to answer in:
# kiln.runner.limits.RunnerSettings.answer_margin_s): past it, the tree's time is spent.
RUN_FLOOR_S = 1.0


@dataclass(frozen=True)
class CallLimits:
    """What one top-level call's tree of inner calls may reach."""

    depth: int = 4  # how deep calls nest: the top call's inner calls are at depth 1
    count: int = 32  # inner calls in the whole tree
    seconds: float = 60.0  # from the first inner call to the end of the tree's last run


@dataclass
class CallBudget:
    """The bounds one tree of calls shares, and what it has used of them."""

    limits: CallLimits
    ends: float | None = None  # monotonic: when the request's time is up (None: not known)
    used: int = 0
    deadline: float | None = None  # monotonic; set by the tree's first inner call

    @classmethod
    def of(cls, limits: CallLimits, time_left_s: float | None) -> CallBudget:
        ends = None if time_left_s is None else time.monotonic() + time_left_s
        return cls(limits, ends)

    def start(self) -> None:
        if self.deadline is None:
            deadline = time.monotonic() + self.limits.seconds
            self.deadline = deadline if self.ends is None else min(deadline, self.ends)

    def pause(self, seconds: float) -> None:
        """Time spent waiting for the client's answers (a held 2025 call): not the calls'
        time, so it moves the deadline on (never past the request's end)."""
        if self.deadline is not None:
            moved = self.deadline + seconds
            self.deadline = moved if self.ends is None else min(moved, self.ends)

    def left_s(self) -> float | None:
        end = self.deadline if self.deadline is not None else self.ends
        return None if end is None else end - time.monotonic()


@dataclass(frozen=True)
class CallLink:
    """A tools/call's place in a tree of calls: its ledger id, its parent's, the tools above it
    (outermost first) and the bounds the tree shares."""

    id: str = field(default_factory=lambda: secrets.token_hex(6))  # as the ledger's new_id
    parent: str | None = None
    chain: tuple[str, ...] = ()
    budget: CallBudget = field(default_factory=lambda: CallBudget(CallLimits()))


def time_left(ctx: CallContext) -> float | None:
    """What a run of this call may take: what the request has left, and once the call's tree
    has made a call, what the tree has left."""
    left = ctx.link.budget.left_s() if ctx.link is not None else None
    return ctx.time_left_s if left is None else left


def calls_in(questions: Sequence[Question]) -> bool:
    """Whether a run's asks hold a call (which only a tools/call can make)."""
    return any(q.method == CALL_METHOD for q in questions)


def refused(text: str) -> dict[str, Any]:
    """An inner call's answer when it was not made, or ended in a protocol error."""
    return {"content": [{"type": "text", "text": text}], "isError": True}


class InnerCalls:
    """Answers a run's call asks by calling tools through the dispatcher's ToolCaller."""

    def __init__(self, caller: ToolCaller) -> None:
        self._caller = caller

    async def answer(
        self,
        turn: Turn,
        tool: ToolView,
        calls: Sequence[Question],
        answers: Mapping[str, Any],
        ctx: CallContext,
        rid: RequestId,
    ) -> tuple[dict[str, Any], list[Question]]:
        """The answers of `calls` (one round's, made side by side), and what they ask the
        client, keyed under their call's key."""
        link = ctx.link or CallLink()
        link.budget.start()
        made = await asyncio.gather(
            *(self._one(turn, tool, call, answers, replace(ctx, link=link), rid) for call in calls)
        )
        got: dict[str, Any] = {}
        asked: list[Question] = []
        for call, (result, questions) in zip(calls, made, strict=True):
            if questions:
                asked.extend(questions)
            else:
                got[call.key] = result
        return got, asked

    async def _one(
        self,
        turn: Turn,
        tool: ToolView,
        call: Question,
        answers: Mapping[str, Any],
        ctx: CallContext,
        rid: RequestId,
    ) -> tuple[dict[str, Any], tuple[Question, ...]]:
        assert ctx.link is not None
        link, name = ctx.link, str(call.params["name"])
        refusal = _refusal(tool, name, link)
        if refusal is not None:
            return refused(refusal), ()
        link.budget.used += 1
        prefix = f"{PREFIX}{call.key}/"
        given = {k[len(prefix) :]: v for k, v in answers.items() if k.startswith(prefix)}
        inner = replace(
            ctx,
            turn=turn.nested(given, _state_of(turn.state_id(), call.key)),
            conversation=None,
            seen=None,
            link=CallLink(parent=link.id, chain=(*link.chain, tool.name), budget=link.budget),
        )
        params = {"name": name, "arguments": call.params.get("arguments", {})}
        try:
            result = await self._caller.call(
                params, version=ANSWER_VERSION, ctx=inner, request_id=rid
            )
        except ProtocolError as error:  # unknown to this caller, a spent quota, the store
            return refused(f"The call of {name!r} was refused: {error.message}"), ()
        if result.get("resultType") != "input_required":
            return result, ()
        return {}, _handed_up(result["inputRequests"], prefix, tool.name, name)


def _refusal(tool: ToolView, name: str, link: CallLink) -> str | None:
    """Why `tool`'s run may not call `name` now, or None."""
    limits, chain = link.budget.limits, " → ".join((*link.chain, tool.name, name))
    if name not in tool.calls:
        declared = ", ".join(tool.calls) if tool.calls else "none"
        return (
            f"Tool {tool.name!r} may not call {name!r}: a tool calls only the tools its "
            f'manifest names in "calls" (it names: {declared})'
        )
    if len(link.chain) + 1 > limits.depth:
        return (
            f"The call of {name!r} was not made: calls nest at most {limits.depth} deep "
            f"({chain}); a tool that calls itself, directly or through others, ends here"
        )
    if link.budget.used >= limits.count:
        return (
            f"The call of {name!r} was not made: one call may make at most {limits.count} "
            f"inner calls, and this one's have all been made ({chain})"
        )
    left = link.budget.left_s()
    if left is not None and left <= RUN_FLOOR_S:
        return f"The call of {name!r} was not made: " + _time_spent(limits, chain)
    return None


def spent(ctx: CallContext, name: str) -> str | None:
    """Why `name` may not run again with its calls' answers: its tree's time is spent (its
    run would start with none and say only that), or None."""
    link = ctx.link
    left = link.budget.left_s() if link is not None else None
    if link is None or left is None or left > RUN_FLOOR_S:
        return None
    chain = " → ".join((*link.chain, name))
    return f"Tool {name!r} was not run again with its calls' answers: " + _time_spent(
        link.budget.limits, chain
    )


def _time_spent(limits: CallLimits, chain: str) -> str:
    return (
        f"the inner calls of one call may take at most {limits.seconds:g} s (or the time the "
        f"request has left), and that is spent ({chain})"
    )


def _state_of(state_id: str | None, key: str) -> str | None:
    """The id an inner call's approvals are spent under: its outer call's state and its key."""
    if state_id is None:
        return None
    return hashlib.sha256(f"{state_id}\0{key}".encode()).hexdigest()


def _handed_up(
    requests: Mapping[str, Any], prefix: str, outer: str, inner: str
) -> tuple[Question, ...]:
    """An inner call's questions, asked through its outer call (a person sees who asks)."""
    asked = []
    for key, request in requests.items():
        params = dict(request["params"])
        if request["method"] == "elicitation/create" and isinstance(params.get("message"), str):
            params["message"] = f"Tool {outer!r} calls {inner!r}.\n{params['message']}"
        asked.append(Question(prefix + key, request["method"], params))
    return tuple(asked)
