"""What a run's pipes and status amount to: its `RunResult`, its arguments as JSON, its log line."""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping
from typing import Any

from kiln.runner.errors import InvalidArgumentsError
from kiln.runner.model import LimitSource, RunRequest, RunResult
from kiln.runner.pipes import Output
from kiln.runner.talk import TalkReader

logger = logging.getLogger("kiln.runner")

# What Node prints when a CommonJS script meets ES-module code, and what to tell the author.
ESM_HINTS = {
    "Cannot use import statement outside a module": (
        "[hint] Kiln runs Node tools as CommonJS: use require(), not import"
    ),
    "ERR_REQUIRE_ESM": (
        "[hint] Kiln runs Node tools as CommonJS and this package is an ES module only: "
        "pin a version that supports require(), or load it with await import() inside an "
        "async function"
    ),
}
# Node 20.19+ can require() most ES modules, but not those using top-level await.
ESM_HINTS["ERR_REQUIRE_ASYNC_MODULE"] = ESM_HINTS["ERR_REQUIRE_ESM"]


def run_result(
    request: RunRequest,
    stdout: Output,
    stderr_output: Output,
    status: dict[str, str],
    server_timed_out: bool,
    deadline_s: float,
    source: LimitSource,
    duration: float,
    disk_quota_bytes: int,
    talk: TalkReader | None = None,
) -> RunResult:
    outcome = status.get("outcome", "")
    timed_out = server_timed_out or outcome == "timeout"
    exit_code: int | None = None
    runner_error: str | None = None
    quota: int | None = None
    stderr = stderr_output.text()
    if outcome.startswith("exit "):
        exit_code = int(outcome.split()[1])
    elif outcome.startswith("quota "):
        quota = disk_quota_bytes
    elif outcome.startswith("error "):
        runner_error = f"the run could not be isolated: {outcome.removeprefix('error ')}"
    elif outcome == "stopped" and not timed_out:
        runner_error = "the run was stopped from outside (its supervisor got SIGTERM)"
    elif not outcome and not timed_out:
        runner_error = "the run's supervisor ended without reporting (was it killed?)"
    if status.get("leftover", "0") != "0":
        logger.warning(
            "run left processes behind",
            extra={"tool": request.label, "leftover": status["leftover"]},
        )
    if request.language == "node":
        hints = [hint for sign, hint in ESM_HINTS.items() if sign in stderr]
        if hints:
            stderr = stderr.rstrip("\n") + "\n" + hints[0] + "\n"
    return RunResult(
        stdout=stdout.text(),
        stderr=stderr,
        exit_code=None if timed_out else exit_code,
        timed_out=timed_out,
        applied_timeout_s=deadline_s,
        duration_s=duration,
        stdout_truncated=stdout.truncated,
        stderr_truncated=stderr_output.truncated,
        stdout_bytes=stdout.total,
        stderr_bytes=stderr_output.total,
        limit_source=source,
        runner_error=runner_error,
        disk_quota_bytes=quota,
        isolation=status.get("isolation", ""),
        fence=status.get("fence", ""),
        mark=status.get("mark", ""),
        asks=tuple(talk.asks.values()) if talk is not None else (),
        talk_problems=tuple(talk.problems) if talk is not None else (),
        go_on=talk.go_on if talk is not None else False,
    )


def json_arguments(arguments: Mapping[str, Any]) -> bytes:
    try:
        return json.dumps(dict(arguments), allow_nan=False).encode()
    except (TypeError, ValueError) as error:
        path = _non_finite_path(arguments, "arguments")
        if path:
            reason = f"{path} is NaN or Infinity, which strict JSON cannot carry"
        else:
            reason = f"the arguments are not JSON ({error})"
        raise InvalidArgumentsError(f"{reason}: a script receives its arguments as JSON") from None


def _non_finite_path(value: Any, path: str) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        return path
    if isinstance(value, Mapping):
        items: Any = ((f"{path}.{key}", item) for key, item in value.items())
    elif isinstance(value, list | tuple):
        items = ((f"{path}[{index}]", item) for index, item in enumerate(value))
    else:
        return ""
    for item_path, item in items:
        found = _non_finite_path(item, item_path)
        if found:
            return found
    return ""


def log_run(request: RunRequest, result: RunResult) -> None:
    # A clean run is in the request's own line already (outcome, duration): logs are billed
    # by the byte, so its details are written at DEBUG; anything else at INFO.
    truncated = result.stdout_truncated or result.stderr_truncated
    clean = result.exit_code == 0 and not (result.timed_out or result.runner_error or truncated)
    logger.log(
        logging.DEBUG if clean else logging.INFO,
        "tool run %s",
        "timed out"
        if result.timed_out
        else "failed in the runner"
        if result.runner_error
        else f"exit {result.exit_code}",
        extra={
            "tool": request.label,
            "language": request.language,
            "duration_s": round(result.duration_s, 4),
            "exit_code": result.exit_code,
            "timed_out": result.timed_out,
            "applied_timeout_s": result.applied_timeout_s,
            "limit_source": result.limit_source,
            "stdout_bytes": result.stdout_bytes,
            "stderr_bytes": result.stderr_bytes,
            "truncated": truncated,
            "runner_error": result.runner_error,
            "isolation": result.isolation,
            "fence": result.fence or "none",
            "mark": result.mark,
            "standby": result.standby,
        },
    )
