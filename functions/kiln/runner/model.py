"""What a run is asked to do and what it reports. Knows nothing about MCP or Lambda."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from kiln.runner.limits import RunLimits
from kiln.runner.talk import Ask, Said

Language = Literal["python", "node"]
# Which bound set the deadline: the tool's own timeout, the time left in the invocation (less
# the margin kept to answer), or the server's maximum.
LimitSource = Literal["tool", "invocation", "server"]


@dataclass(frozen=True)
class RunRequest:
    """One script run.

    `timeout_s` is the tool's own limit; `time_left_s` is what the caller (a Lambda
    invocation, or a configured local budget) has left. The runner applies
    min(timeout_s, time_left_s - answer margin) and reports the limit it really applied.
    """

    language: Language
    code: str
    arguments: Mapping[str, Any]
    timeout_s: float
    time_left_s: float | None = None
    bundle_path: Path | None = None
    extra_env: Mapping[str, str] = field(default_factory=dict)
    label: str = ""  # tool name and revision, for the run's log line
    files: Mapping[str, bytes] = field(default_factory=dict)  # written beside the script
    limits: RunLimits | None = None  # tighter limits this tool asks for
    # Whose run this is, for a fair share of the slots (kiln.runner.slots): "tool:<id>",
    # "caller:<key>", "view:<name>". And, asked only when no slot is free: does the call
    # come from inside a run (then it is refused rather than made to wait)?
    shares: tuple[str, ...] = ()
    from_run: Callable[[], bool] | None = field(default=None, compare=False)
    # The conversation (see talk.py): answers so far, the kinds of question the caller can
    # answer, and who hears progress and log lines as they come (on the event loop).
    answers: Mapping[str, Any] | None = None
    can_ask: tuple[str, ...] = ()
    can_task: bool = False  # it may say {"task": true} to go on as a task (KILN_TASK=later)
    calls: tuple[str, ...] = ()  # the tools it may call (KILN_CALLS; see TALKING.md)
    heard: Callable[[Said], None] | None = field(default=None, compare=False)


@dataclass(frozen=True)
class RunResult:
    stdout: str
    stderr: str
    # None when the run was killed at its deadline; -N when the script died of signal N
    # (the subprocess module's convention), e.g. -25 for SIGXFSZ past the file size limit.
    exit_code: int | None
    timed_out: bool
    applied_timeout_s: float
    duration_s: float
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    stdout_bytes: int = 0  # bytes the script wrote, including what was cut
    stderr_bytes: int = 0
    limit_source: LimitSource = "tool"
    started: bool = True  # False when no time was left to start the script at all
    # Set when the runner itself failed (its helper died, a supervisor was killed): the
    # script's own outcome is unknown, and exit_code is None.
    runner_error: str | None = None
    # Set when the run was stopped for using more disk than this (work and temporary files).
    disk_quota_bytes: int | None = None
    # What kept the run apart, as its supervisor reported it: "mounts" (a uid and a mount
    # namespace of its own), "uid" (a uid of its own), "landlock" (the server's uid, fenced
    # by Landlock), "shared" (the server's uid, unfenced); "" when it never started.
    isolation: str = ""
    fence: str = ""  # the Landlock ruleset it entered, e.g. "landlock/7:files+tcp+signals"
    # "seccomp" when its processes carry the run mark (its orphans are found by it), "none"
    # where the kernel refused it (then only the runner function's sweep finds them).
    mark: str = ""
    standby: bool = False  # it was prepared before the call (see kiln.runner.standby)
    ready: bool = False  # ... and seen waiting for it: the script had started (a save's warm-up)
    asks: tuple[Ask, ...] = ()  # the questions it asked on its talk channel (talk.py)
    talk_problems: tuple[str, ...] = ()  # talk lines that broke the contract, and why
    go_on: bool = False  # it said {"task": true}: go on as a task

    @property
    def failed(self) -> bool:
        return (
            self.timed_out
            or self.exit_code != 0
            or self.runner_error is not None
            or self.disk_quota_bytes is not None
        )
