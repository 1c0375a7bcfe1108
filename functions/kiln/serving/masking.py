"""A run's words with the caller's connection tokens masked (kiln.connections).

A tool acting for its caller gets that caller's access token (`KILN_CONNECTION_<PROVIDER>`);
whatever the run says back -- its output, its error output, its progress and log lines, the
questions it asks -- may be kept where tokens must never be (a task record, an idempotent
call's stored answer, a status message) or shown to someone else (the author reading a
task's status). So each token value is replaced by the variable's name in brackets
(`[KILN_CONNECTION_GITHUB]`) before anything of the run leaves the call path, as CI systems
mask their secrets in logs. What the run sends over the network itself is its own business.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from kiln.protocol.backend import Conversation
from kiln.runner.model import RunResult

MIN_MASKED = 8  # shorter values would mask ordinary words: no provider issues such a token


class Masker:
    """Replaces each token value (longest first) by its variable's name in brackets."""

    def __init__(self, tokens: Mapping[str, str]) -> None:
        pairs = [(value, f"[{name}]") for name, value in tokens.items() if len(value) >= MIN_MASKED]
        self._pairs = sorted(pairs, key=lambda pair: -len(pair[0]))

    def __bool__(self) -> bool:
        return bool(self._pairs)

    def text(self, text: str) -> str:
        for value, name in self._pairs:
            if value in text:
                text = text.replace(value, name)
        return text

    def value(self, value: Any) -> Any:
        """A JSON value with every string in it masked."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, Mapping):
            return {self.text(str(k)): self.value(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.value(v) for v in value]
        return value

    def result(self, result: RunResult) -> RunResult:
        asks = tuple(dataclasses.replace(a, params=self.value(a.params)) for a in result.asks)
        return dataclasses.replace(
            result,
            stdout=self.text(result.stdout),
            stderr=self.text(result.stderr),
            asks=asks,
            talk_problems=tuple(self.text(p) for p in result.talk_problems),
        )

    def conversation(self, conversation: Conversation | None) -> Conversation | None:
        """The conversation, hearing the run's progress and log lines masked."""
        if conversation is None or conversation.hear is None:
            return conversation
        hear = conversation.hear

        def masked(kind: str, data: Mapping[str, Any]) -> None:
            hear(kind, self.value(data))

        heard: Callable[[str, Mapping[str, Any]], None] = masked
        return dataclasses.replace(conversation, hear=heard)
