"""The runner function's answer, read as untrusted input (the caller's side of `remote.py`).

Whatever answers an invocation of the runner function can be written by a tool: the Runtime
API on the environment's loopback hands an invocation to any process that asks for it, and
lets it post the response. A process that takes an invocation sees its whole payload, so a
secret sent in the payload would authenticate nothing; instead the answer is read as the
tool's own word:

- its shape is checked strictly (`Answer`): an unknown or mistyped field, a list or string
  past its cap, or more than `MAX_ANSWER_BYTES` refuses the whole answer, and the run is a
  runner error naming the first problems (never their values);
- its questions and talk lines pass the talk channel's own rules (`talk.parse_line`): a
  `kiln/` key, an unknown kind, a question in the talk lines are refused the same way;
- what kept the run apart is never read from it: `RUNNER_FUNCTION_HOLDS` is what Lambda gives
  every run there (one uid, no Landlock, seccomp refused: what `kiln doctor --aws` measures
  and the deploy checks), and a run there never comes from a standby. An answer that claims
  more is logged as such.
"""

from __future__ import annotations

import json
import logging
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kiln.runner.model import RunResult
from kiln.runner.talk import (
    MAX_ASKS,
    MAX_PROBLEMS,
    MAX_TALK_LINES,
    Ask,
    Log,
    Progress,
    Said,
    parse_line,
)

log = logging.getLogger("kiln.runner.answer")

MAX_ANSWER_BYTES = 6 * 1024 * 1024  # Lambda's synchronous response limit
MAX_SHOWN_PROBLEMS = 3
RUNNER_FUNCTION_HOLDS = {"isolation": "shared", "fence": "", "mark": "none"}

Count = Annotated[int, Field(ge=0)]
Seconds = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Label = Annotated[str, Field(max_length=200)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class _Ask(_Strict):
    key: str
    kind: str
    params: dict[str, Any]


class _Result(_Strict):
    """`RunResult` as `remote.result_json` writes it: every field, each of its type."""

    stdout: str
    stderr: str
    exit_code: int | None
    timed_out: bool
    applied_timeout_s: Seconds
    duration_s: Seconds
    stdout_truncated: bool
    stderr_truncated: bool
    stdout_bytes: Count
    stderr_bytes: Count
    limit_source: Literal["tool", "invocation", "server"]
    started: bool
    runner_error: Annotated[str, Field(max_length=2000)] | None
    disk_quota_bytes: Count | None
    isolation: Label
    fence: Label
    mark: Label
    standby: bool
    ready: bool
    asks: Annotated[list[_Ask], Field(max_length=MAX_ASKS)]
    talk_problems: Annotated[list[Annotated[str, Field(max_length=2000)]],
                             Field(max_length=MAX_PROBLEMS)]  # fmt: skip
    go_on: bool


class _Swept(_Strict):
    killed: Count
    alive: Count
    removed: Count
    pid: Count


class Answer(_Strict):
    """A run's answer: its result, its progress and log lines, and what the sweep found."""

    result: _Result
    talk: Annotated[list[dict[str, Any]], Field(max_length=MAX_TALK_LINES)]
    left_out: Count = 0  # log lines past the answer's cap (remote.talk_json)
    swept: _Swept | None = None


class Refusal(_Strict):
    error: Annotated[str, Field(max_length=2000)]


def read_answer(data: bytes) -> tuple[RunResult, list[Said], int] | str:
    """The run an answer reports (result, talk lines, log lines left out), or why it is
    refused: a sentence for `RunResult.runner_error`."""
    if len(data) > MAX_ANSWER_BYTES:
        return refused(f"it is {len(data)} bytes, more than the {MAX_ANSWER_BYTES} Lambda sends")
    try:
        sent = json.loads(data)
    except (ValueError, RecursionError):
        return refused("it is not JSON")
    model = Refusal if isinstance(sent, dict) and "error" in sent else Answer
    try:
        shaped = model.model_validate(sent)
    except ValidationError as error:
        return refused(_problems(error))
    if isinstance(shaped, Refusal):
        return f"the runner function refused the run: {shaped.error}"
    try:
        asks = tuple(_ask(index, ask) for index, ask in enumerate(shaped.result.asks))
        said = [_said(index, line) for index, line in enumerate(shaped.talk)]
    except ValueError as error:
        return refused(str(error))
    fields = shaped.result.model_dump()
    # A run that never started was kept apart by nothing ("" labels, as a local one says).
    held = RUNNER_FUNCTION_HOLDS if fields["started"] else dict.fromkeys(RUNNER_FUNCTION_HOLDS, "")
    claimed = {name: fields[name] for name in RUNNER_FUNCTION_HOLDS}
    if any(fields[name] not in ("", held[name]) for name in held):
        log.warning(
            "the runner function's answer claims what no run there gets; reported as held",
            extra={"claimed": claimed, "reported": held},
        )
    fields.update(
        held,
        standby=False,
        ready=False,
        asks=asks,
        talk_problems=tuple(fields["talk_problems"]),
    )
    return RunResult(**fields), said, shaped.left_out


def refused(why: str) -> str:
    return f"the runner function's answer was refused (it is not what Kiln's runner sends): {why}"


def _problems(error: ValidationError) -> str:
    found = error.errors(include_url=False, include_input=False)
    shown = [f"{'.'.join(map(str, e['loc'])) or '(answer)'}: {e['msg']}" for e in found]
    more = len(found) - MAX_SHOWN_PROBLEMS
    tail = f" (and {more} more)" if more > 0 else ""
    return "; ".join(shown[:MAX_SHOWN_PROBLEMS]) + tail


def _ask(index: int, ask: _Ask) -> Ask:
    line = json.dumps({"ask": ask.key, ask.kind: ask.params})
    try:
        said = parse_line(line.encode())
    except ValueError as error:
        raise ValueError(f"result.asks.{index} {error}") from None
    assert isinstance(said, Ask)  # an "ask" line is an Ask or refused
    return said


def _said(index: int, line: dict[str, Any]) -> Said:
    try:
        said = parse_line(json.dumps(line).encode())
    except (ValueError, TypeError) as error:
        raise ValueError(f"talk.{index} {error}") from None
    if not isinstance(said, Progress | Log):
        raise ValueError(f"talk.{index} is not a progress or log line (questions travel in "
                         "result.asks)")  # fmt: skip
    return said
