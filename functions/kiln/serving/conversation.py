"""Between the protocol's conversation and the runner's talk channel (both sides plain data).

The protocol hands a call's `Conversation` (answers so far, what the caller can answer, who
hears progress and logs); the runner reports `Said` lines and `Ask`s. This module translates:
a runner `Ask` becomes a protocol `Question` named by its MCP method.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kiln.access.approvals import (
    APPROVAL_KEY,
    USED_AGAIN,
    Requirement,
    SpentApprovals,
    approval_question,
    needs_approval,
    verdict,
)
from kiln.catalog.model import Tool
from kiln.protocol.backend import Conversation, Question, ToolOutcome
from kiln.runner import RunResult
from kiln.runner.contract import contract_text
from kiln.runner.talk import KILN_LOGGER, Ask, Log, Progress, Said, tool_logger

METHODS = {
    "elicitation": "elicitation/create",
    "sampling": "sampling/createMessage",
    "roots": "roots/list",
    "call": "tools/call",  # answered by Kiln itself (kiln.protocol.inner), never the client
}


def run_fields(conversation: Conversation | None, tool: str) -> dict[str, Any]:
    """The RunRequest fields that carry a conversation to the script (a run of `tool`)."""
    if conversation is None:
        return {}
    return {
        # Kiln's own answers (kiln/approval) are not the script's business.
        "answers": {k: v for k, v in conversation.answers.items() if not k.startswith("kiln/")},
        "can_ask": tuple(conversation.can_ask),
        "heard": _listener(conversation.hear, tool) if conversation.hear is not None else None,
        "can_task": conversation.can_task,
        "calls": tuple(conversation.calls),
    }


def _listener(hear: Callable[[str, dict[str, Any]], None], tool: str) -> Callable[[Said], None]:
    """Hands a run's progress and log lines on; a log line is the tool's (its logger says so:
    `tool_logger`), unless Kiln itself wrote it about the run."""

    def heard(said: Said) -> None:
        if isinstance(said, Progress):
            hear(
                "progress",
                {"progress": said.progress, "total": said.total, "message": said.message},
            )
        elif isinstance(said, Log):
            logger = KILN_LOGGER if said.kiln else tool_logger(tool, said.logger)
            hear("log", {"level": said.level, "data": said.data, "logger": logger})

    return heard


def tool_outcome(name: str, result: RunResult) -> ToolOutcome:
    """The ToolOutcome of a run, with its questions; talk that broke the contract is an error."""
    if result.talk_problems:
        lines = "\n".join(f"- {problem}" for problem in result.talk_problems)
        return ToolOutcome(
            f"Tool {name!r} wrote talk lines that Kiln cannot use (KILN_TALK_FD takes one JSON "
            f"object per line; see the README, 'Scripts that talk back'):\n{lines}",
            True,
        )
    text = contract_text(result)
    if result.go_on and not result.asks and not result.failed:
        return ToolOutcome(text, False, stdout=result.stdout, escalate=True)
    if result.asks and not result.failed:
        return ToolOutcome(text, False, stdout=result.stdout, questions=_questions(result.asks))
    return ToolOutcome(text, result.failed, stdout=result.stdout, timed_out=result.timed_out)


def _questions(asks: tuple[Ask, ...]) -> tuple[Question, ...]:
    return tuple(Question(ask.key, METHODS[ask.kind], dict(ask.params)) for ask in asks)


@dataclass(frozen=True)
class Approval:
    """A call under a view or key that requires confirmation: `outcome` is the question to ask or
    the refusal to answer with (None: approved, run it); `verdict` what the ledger says."""

    outcome: ToolOutcome | None
    verdict: str | None = None
    at: str = ""


def approval_for(
    required: Requirement | None,
    tool: Tool,
    arguments: Mapping[str, Any],
    talk: Conversation | None,
) -> Approval | None:
    """None when no approval is needed; else what the user said, or the question to them."""
    head = tool.head
    if required is None or not needs_approval(required.policy, head.annotations):
        return None
    answer = talk.answers.get(APPROVAL_KEY) if talk is not None else None
    if answer is None:
        if talk is None or "elicitation" not in talk.can_ask:
            return Approval(
                ToolOutcome(
                    f"Tool {tool.name!r} was not run: {required.source} requires the user's "
                    f"approval first (confirm: {required.policy}), and this client cannot be "
                    "asked: "
                    "it declared no elicitation capability (or, on AWS Lambda, spoke MCP 2025, "
                    "where a request cannot wait for an answer; use 2026-07-28).",
                    True,
                ),
                "approval not possible: the client cannot be asked",
            )
        params = approval_question(tool.name, arguments, head.input_schema, head.annotations)
        question = Question(APPROVAL_KEY, "elicitation/create", params)
        return Approval(ToolOutcome("", False, questions=(question,)))
    said = verdict(answer)
    if said == "approved":
        return Approval(None, "approved", _now())
    return Approval(
        ToolOutcome(f"Tool {tool.name!r} was not run: the user {said} it.", True),
        f"approval {said} by the user",
    )


async def spent(
    spends: SpentApprovals | None,
    approval: Approval | None,
    tool: Tool,
    arguments: Mapping[str, Any],
    talk: Conversation | None,
) -> Approval | None:
    """An approval given in a requestState is spent before the run it allows; the same
    state sent again is not run (the store says so, whichever process it reaches)."""
    if approval is None or approval.verdict != "approved" or spends is None:
        return approval
    if talk is None or talk.state_id is None:  # asked inside this request (2025, held)
        return approval
    if await asyncio.to_thread(spends.spend, talk.state_id):
        return approval
    return approval_used(tool, arguments, talk)


def approval_used(tool: Tool, arguments: Mapping[str, Any], talk: Conversation) -> Approval:
    """A state whose approval was spent, sent again: the tool is not run, and the user is
    asked afresh (the question says why), or told so when this request cannot ask."""
    head = tool.head
    if "elicitation" not in talk.can_ask:
        text = (
            f"Tool {tool.name!r} was not run: the approval sent with this call was already "
            "used (an approval runs a tool once); call it again without requestState to be "
            "asked again."
        )
        return Approval(ToolOutcome(text, True), USED_AGAIN)
    params = approval_question(tool.name, arguments, head.input_schema, head.annotations)
    used = (
        f"The approval sent with this call was already used: it ran {tool.name!r} once, and an "
        "approval runs a tool once."
    )
    params["message"] = f"{used}\n{params['message']}"
    question = Question(APPROVAL_KEY, "elicitation/create", params)
    return Approval(ToolOutcome("", False, questions=(question,)), USED_AGAIN)


def approved_by(approval: Approval | None, principal: Any) -> str | None:
    """The ledger detail of a call that ran after its approval."""
    if approval is None or approval.verdict != "approved":
        return None
    who = getattr(principal, "label", "anonymous") if principal is not None else "anonymous"
    return f"approved by {who} at {approval.at}"


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
