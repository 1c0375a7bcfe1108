"""The talk channel: what a script says while it runs, beside its answer on stdout.

A script finds a write-only pipe at the descriptor named by `KILN_TALK_FD` and writes one JSON
object per line to it (see docs/talk-back.md for the author's side). Three kinds of line:

    {"progress": 50, "total": 100, "message": "halfway"}        total and message optional
    {"log": "warning", "data": "disk almost full"}             a level and any JSON data
    {"ask": "account", "elicitation": {message, requestedSchema}}   a question for the user
    {"ask": "summary", "sampling": {messages, maxTokens, ...}}      a question for the model
    {"ask": "where", "roots": {}}                                   the client's roots
    {"ask": "rate", "call": {"name": "fx_rate", "arguments": {...}}}  a call of another tool
    {"task": true}        go on as a task (only where KILN_TASK=later; then end the run)

An ask ends the conversation for this run: once a run has asked, its stdout is not its
answer. The caller of the tool gets the questions; the next run of the same call sees every
answer so far in `KILN_ANSWERS` (a JSON object, key -> the client's answer) and asks only what
is still missing. `KILN_CAN_ASK` lists the kinds the calling client can answer.

Everything here runs on the event loop; a line past `MAX_LINE_BYTES`, or talk past
`MAX_TALK_BYTES`, is counted as a problem and dropped, so memory stays flat.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

MAX_LINE_BYTES = 1 << 20
MAX_TALK_BYTES = 8 << 20
MAX_ASKS = 16
MAX_KEY_CHARS = 64
MAX_PROBLEMS = 5
MAX_TALK_LINES = 1000  # of progress and logs in the runner function's answer (remote.py)
LOG_LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")
ASK_KINDS = ("elicitation", "sampling", "roots", "call")
AskKind = Literal["elicitation", "sampling", "roots", "call"]


@dataclass(frozen=True)
class Progress:
    progress: float
    total: float | None = None
    message: str | None = None


@dataclass(frozen=True)
class Log:
    level: str
    data: Any
    logger: str | None = None  # the author's name for it, as the line said
    kiln: bool = False  # Kiln's own line about the run (never a talk line's)


KILN_LOGGER = "kiln"  # the logger of Kiln's own messages; a tool's are `tool_logger`'s


def tool_logger(tool: str, logger: str | None) -> str:
    """The logger a client sees on a tool's log line: `tool/<name>`, then the author's own
    name for it, if any (`tool/sync/kiln`), so that no tool speaks as Kiln."""
    return f"tool/{tool}" if not logger else f"tool/{tool}/{logger}"


@dataclass(frozen=True)
class Ask:
    key: str
    kind: AskKind
    params: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class GoOn:
    """The run asks to go on as a task."""


Said = Progress | Log | Ask | GoOn


def parse_line(line: bytes) -> Said:
    """One line of talk; ValueError with the rule it breaks."""
    try:
        said = json.loads(line)
    except (ValueError, RecursionError):
        raise ValueError("is not a JSON object") from None
    if not isinstance(said, dict):
        raise ValueError("is not a JSON object")
    kinds = [name for name in ("progress", "log", "ask", "task") if name in said]
    if len(kinds) != 1:
        raise ValueError('holds none (or more than one) of "progress", "log", "ask" and "task"')
    readers: dict[str, Callable[[dict[str, Any]], Said]] = {
        "progress": _progress, "log": _log, "ask": _ask, "task": _task,
    }  # fmt: skip
    return readers[kinds[0]](said)


def _task(said: dict[str, Any]) -> GoOn:
    if said != {"task": True}:
        raise ValueError('a task line is exactly {"task": true}')
    return GoOn()


def _progress(said: dict[str, Any]) -> Progress:
    value, total, message = said["progress"], said.get("total"), said.get("message")
    if not _number(value) or (total is not None and not _number(total)):
        raise ValueError('"progress" (and "total", when given) must be finite numbers')
    if message is not None and not isinstance(message, str):
        raise ValueError('"message" must be a string')
    if set(said) - {"progress", "total", "message"}:
        raise ValueError('a progress line holds only "progress", "total" and "message"')
    return Progress(value, total, message)


def _log(said: dict[str, Any]) -> Log:
    level, logger = said["log"], said.get("logger")
    if level not in LOG_LEVELS:
        raise ValueError(f'"log" must be one of {", ".join(LOG_LEVELS)}')
    if logger is not None and not isinstance(logger, str):
        raise ValueError('"logger" must be a string')
    if set(said) - {"log", "data", "message", "logger"}:
        raise ValueError('a log line holds only "log", "data" (or "message") and "logger"')
    data = said["data"] if "data" in said else said.get("message", "")
    return Log(level, data, logger)


def _ask(said: dict[str, Any]) -> Ask:
    key = said["ask"]
    if not isinstance(key, str) or not 0 < len(key) <= MAX_KEY_CHARS:
        raise ValueError(f'"ask" must be a key of 1 to {MAX_KEY_CHARS} characters')
    if key.startswith("kiln/"):
        raise ValueError('"ask" keys starting with "kiln/" are Kiln\'s own (approvals)')
    kinds = [kind for kind in ASK_KINDS if kind in said]
    if len(kinds) != 1 or set(said) != {"ask", kinds[0]}:
        raise ValueError(
            'an ask holds "ask" and exactly one of "elicitation", "sampling", "roots", "call"'
        )
    kind: AskKind = kinds[0]  # type: ignore[assignment]
    params = said[kind]
    if not isinstance(params, dict):
        raise ValueError(f'"{kind}" must be an object (the request\'s params)')
    if kind == "call":
        params = _call(params)
    return Ask(key, kind, params)


def _call(params: dict[str, Any]) -> dict[str, Any]:
    """A call of another tool: its name, and its arguments (an object, {} when left out)."""
    name, arguments = params.get("name"), params.get("arguments", {})
    if not isinstance(name, str) or not name:
        raise ValueError('a "call" names its tool: {"name": "<tool>", "arguments": {...}}')
    if not isinstance(arguments, dict):
        raise ValueError('a "call"\'s "arguments" must be an object')
    if set(params) - {"name", "arguments"}:
        raise ValueError('a "call" holds only "name" and "arguments"')
    return {"name": name, "arguments": arguments}


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


class TalkReader(asyncio.Protocol):
    """Reads the talk pipe: hands progress and logs to `heard` as they come, keeps the asks."""

    def __init__(self, heard: Callable[[Said], None] | None) -> None:
        self.heard = heard
        self.asks: dict[str, Ask] = {}
        self.go_on = False
        self.problems: list[str] = []
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pending = bytearray()
        self._total = 0
        self._lines = 0
        self._skipping = False  # inside a line past the cap

    def data_received(self, data: bytes) -> None:
        self._total += len(data)
        if self._total > MAX_TALK_BYTES:
            if self._total - len(data) <= MAX_TALK_BYTES:
                self._problem(
                    f"the run wrote more than {MAX_TALK_BYTES} bytes of talk; the rest was dropped"
                )
            return
        self._pending += data
        while (end := self._pending.find(b"\n")) >= 0:
            line = bytes(self._pending[:end])
            del self._pending[: end + 1]
            self._line(line)
        if len(self._pending) > MAX_LINE_BYTES:
            self._lines += 1
            self._problem(f"line {self._lines} is longer than {MAX_LINE_BYTES} bytes")
            self._pending.clear()
            self._skipping = True

    def _line(self, line: bytes) -> None:
        if self._skipping:  # the end of a line already reported as too long
            self._skipping = False
            return
        self._lines += 1
        if len(line) > MAX_LINE_BYTES:
            self._problem(f"line {self._lines} is longer than {MAX_LINE_BYTES} bytes")
            return
        if not line.strip():
            return
        try:
            said = parse_line(line)
        except ValueError as error:
            self._problem(f"line {self._lines} {error}")
            return
        if isinstance(said, GoOn):
            self.go_on = True
        elif isinstance(said, Ask):
            if said.key not in self.asks and len(self.asks) >= MAX_ASKS:
                self._problem(f"line {self._lines}: a run may ask at most {MAX_ASKS} questions")
                return
            self.asks[said.key] = said
        elif self.heard is not None:
            self.heard(said)

    def _problem(self, text: str) -> None:
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(text)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._pending and not self._skipping:
            self._line(bytes(self._pending))  # a last line without its newline still counts
        self._pending.clear()
        if not self.closed.done():
            self.closed.set_result(None)


class Told(Protocol):
    """What a run is told of its conversation (a RunRequest's fields)."""

    @property
    def answers(self) -> Mapping[str, Any] | None: ...
    @property
    def can_ask(self) -> tuple[str, ...]: ...
    @property
    def can_task(self) -> bool: ...
    @property
    def calls(self) -> tuple[str, ...]: ...


def talk_environment(run: Told) -> dict[str, str]:
    """What a run is told of its conversation, through its private settings pipe: the
    answers so far, what the caller can answer and (KILN_CALLS) the tools it may call."""
    told = {
        "KILN_ANSWERS": json.dumps(dict(run.answers or {}), separators=(",", ":")),
        "KILN_CAN_ASK": " ".join(run.can_ask),
        "KILN_CALLS": json.dumps(list(run.calls), separators=(",", ":")),
    }
    if run.can_task:
        told["KILN_TASK"] = "later"
    return told
