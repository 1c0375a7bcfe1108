"""The text a run becomes, as the script contract defines it.

Lines, in this order, joined with "\\n" and with no trailing newline:

1. stdout with its trailing line breaks (\\n, \\r\\n) removed, everything else kept as printed;
   `(no output)` when stdout is empty or only whitespace;
2. `[stdout truncated: K of N bytes shown]` when stdout passed its cap;
3. `[stderr] ` followed by stderr, its trailing line breaks removed, when stderr has anything
   but whitespace (a multi-line stderr keeps its lines; only the first gets the prefix);
4. `[stderr truncated: K of N bytes shown]` when stderr passed its cap;
5. the outcome, when it is not a clean exit 0:
   `[timeout] killed after 2.0 s (the tool's limit)` — the limit really applied, and which
   bound it came from: `the tool's limit`, `time left in the invocation`, `the server's
   maximum`; `[timeout] not started: no time was left in the invocation` when the run was
   refused before starting; `[killed by signal SIGXFSZ: file size limit exceeded]` when the
   script died of a signal; `[exit N]` for any other non-zero exit. Exit 124 is `[exit 124]`:
   only the runner's own clock makes a timeout. `[runner error] ...` when the runner itself
   failed and the script's outcome is unknown. `[disk quota] stopped after writing more than
   256 MiB of files (the run's quota)` when its files outgrew the quota where no tmpfs
   bounds them (with one, a write past the quota fails with ENOSPC inside the script).

So a script that prints nothing, writes "failure details\\n" to stderr and exits 7 gives
exactly "(no output)\\n[stderr] failure details\\n[exit 7]".
"""

from __future__ import annotations

import signal

from kiln.runner.model import LimitSource, RunResult

NO_OUTPUT = "(no output)"
LIMIT_PHRASES: dict[LimitSource, str] = {
    "tool": "the tool's limit",
    "invocation": "time left in the invocation",
    "server": "the server's maximum",
}
SIGNAL_MEANINGS = {
    signal.SIGXFSZ: "file size limit exceeded",
    signal.SIGXCPU: "CPU time limit exceeded",
    signal.SIGSEGV: "segmentation fault",
    signal.SIGBUS: "bus error",
    signal.SIGABRT: "aborted",
    signal.SIGKILL: "killed",
    signal.SIGTERM: "terminated",
}


def contract_text(result: RunResult) -> str:
    """The MCP text of a run: stdout or `(no output)`, then stderr and outcome lines."""
    lines = [_trim(result.stdout) if result.stdout.strip() else NO_OUTPUT]
    if result.stdout_truncated:
        lines.append(_truncated("stdout", result.stdout, result.stdout_bytes))
    if result.stderr.strip():
        lines.append(f"[stderr] {_trim(result.stderr)}")
    if result.stderr_truncated:
        lines.append(_truncated("stderr", result.stderr, result.stderr_bytes))
    outcome = _outcome(result)
    if outcome:
        lines.append(outcome)
    return "\n".join(lines)


def _trim(text: str) -> str:
    return text.rstrip("\r\n")


def _truncated(stream: str, kept: str, total: int) -> str:
    return f"[{stream} truncated: {len(kept.encode('utf-8'))} of {total} bytes shown]"


def _outcome(result: RunResult) -> str:
    if result.runner_error is not None and not result.timed_out:
        return f"[runner error] {result.runner_error}"
    if result.disk_quota_bytes is not None:
        mib = result.disk_quota_bytes / (1024 * 1024)
        return (
            f"[disk quota] stopped after writing more than {mib:g} MiB of files (the run's quota)"
        )
    if result.timed_out:
        if not result.started:
            if result.limit_source == "invocation":
                return "[timeout] not started: no time was left in the invocation"
            return f"[timeout] not started: {LIMIT_PHRASES[result.limit_source]} is 0 s"
        phrase = LIMIT_PHRASES[result.limit_source]
        return f"[timeout] killed after {format_seconds(result.applied_timeout_s)} s ({phrase})"
    code = result.exit_code
    if code is None or code == 0:
        return ""
    if code < 0:
        return f"[killed by signal {_signal_text(-code)}]"
    return f"[exit {code}]"


def _signal_text(number: int) -> str:
    try:
        sig = signal.Signals(number)
    except ValueError:
        return str(number)
    meaning = SIGNAL_MEANINGS.get(sig)
    return f"{sig.name}: {meaning}" if meaning else sig.name


def format_seconds(seconds: float) -> str:
    """2.0, 0.25, 12.5: one decimal, two below a second."""
    return f"{seconds:.1f}" if round(seconds, 2) >= 1 else f"{seconds:.2f}"
