"""Between the protocol's conversation and the runner's talk channel (both sides plain data).

The protocol hands a call's `Conversation` (answers so far, what the caller can answer, who
hears progress and logs); the runner reports `Said` lines and `Ask`s. This module translates:
a runner `Ask` becomes a protocol `Question` named by its MCP method.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kiln.protocol.backend import Conversation, Question, ToolOutcome
from kiln.runner import RunResult
from kiln.runner.contract import contract_text
from kiln.runner.talk import Ask, Log, Progress, Said

METHODS = {
    "elicitation": "elicitation/create",
    "sampling": "sampling/createMessage",
    "roots": "roots/list",
}


def run_fields(conversation: Conversation | None) -> dict[str, Any]:
    """The RunRequest fields that carry a conversation to the script."""
    if conversation is None:
        return {}
    return {
        "answers": dict(conversation.answers),
        "can_ask": tuple(conversation.can_ask),
        "heard": _listener(conversation.hear) if conversation.hear is not None else None,
        "can_task": conversation.can_task,
    }


def _listener(hear: Callable[[str, dict[str, Any]], None]) -> Callable[[Said], None]:
    def heard(said: Said) -> None:
        if isinstance(said, Progress):
            hear(
                "progress",
                {"progress": said.progress, "total": said.total, "message": said.message},
            )
        elif isinstance(said, Log):
            hear("log", {"level": said.level, "data": said.data, "logger": said.logger})

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
    return ToolOutcome(text, result.failed, stdout=result.stdout)


def _questions(asks: tuple[Ask, ...]) -> tuple[Question, ...]:
    return tuple(Question(ask.key, METHODS[ask.kind], dict(ask.params)) for ask in asks)
