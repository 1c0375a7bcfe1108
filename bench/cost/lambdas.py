"""The two functions a tools/call passes through, run as Lambda runs them, and what they spend.

Both run under the Lambda profile of the e2e tests (tests/e2e/lambda_profile.py): the real
runtime client (awslambdaric) in a sandbox of its own (pid, mount and network namespaces, one
uid, a private /tmp), so the runner function's sweep after each run reaches nothing but its
own environment. `mcp` is the public function; it sends each run to `runner` through a
stand-in for Lambda's Invoke API (`TenantInvoke`), as `KILN_RUNNER_FUNCTION` makes it do in
AWS. Each function signs its AWS calls as its role (`kiln-role/<name>`), so the emulator's
call log says which function waited on which call.

`Spend` reads what a function's processes used, from outside: CPU time (user + system, of
every live process of its uid, with what their reaped children used) and the bytes it logged.
CPU time is what the machine's load does not inflate: a process waiting for a core is not
charged for it, where its wall time is.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.e2e.lambda_profile import Environment, TenantInvoke

TICK_S = 1 / os.sysconf("SC_CLK_TCK")


def _times(pid: int) -> int:
    """utime + stime + cutime + cstime of one process, in clock ticks (0 if it is gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
    except OSError:
        return 0
    return sum(int(value) for value in fields[11:15])


def _high_water_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _parent(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return int(handle.read().rsplit(b")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def _thread_times(pid: int) -> dict[int, int]:
    """utime + stime of each thread of `pid` (clock ticks), by thread id."""
    found = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return {}
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()
            found[int(tid)] = int(fields[11]) + int(fields[12])
        except (OSError, ValueError, IndexError):
            continue
    return found


@dataclass
class Spend:
    """One function's environments: CPU seconds used and bytes logged, read at any moment."""

    environments: list[Environment]

    def cpu_s(self) -> float:
        return sum(_times(pid) for env in self.environments for pid in env.processes()) * TICK_S

    def runtimes(self) -> list[int]:
        """Each environment's runtime process (awslambdaric): the one whose parent is not of
        its uid (the sandbox's init)."""
        found = []
        for env in self.environments:
            pids = env.processes()
            found += [pid for pid in pids if _parent(pid) not in pids]
        return found

    def split_s(self) -> dict[str, float]:
        """CPU seconds so far of the runtime processes' main threads, their other threads,
        and everything else of the function (its children, living and reaped)."""
        runtimes = self.runtimes()
        main = other = 0
        for pid in runtimes:
            for tid, ticks in _thread_times(pid).items():
                if tid == pid:
                    main += ticks
                else:
                    other += ticks
        total = self.cpu_s()
        return {"main thread": main * TICK_S, "other threads": other * TICK_S,
                "children": total - (main + other) * TICK_S}  # fmt: skip

    def log_bytes(self) -> int:
        return sum(env.output.stat().st_size for env in self.environments)

    def log_lines(self, since: list[int]) -> list[bytes]:
        """What each environment logged after `since` (its sizes then, as `log_sizes` gave)."""
        lines: list[bytes] = []
        for env, start in zip(self.environments, since, strict=False):
            with env.output.open("rb") as handle:
                handle.seek(start)
                lines += handle.read().splitlines(keepends=True)
        return lines

    def log_sizes(self) -> list[int]:
        return [env.output.stat().st_size for env in self.environments]

    def peak_rss_mb(self) -> float:
        pids = [pid for env in self.environments for pid in env.processes()]
        return max((_high_water_kb(pid) for pid in pids), default=0) / 1024


@dataclass
class Functions:
    mcp: Environment
    runners: TenantInvoke

    def spend(self, name: str) -> Spend:
        if name == "mcp":
            return Spend([self.mcp])
        return Spend(list(self.runners.environments.values()))


def _runtime_env(name: str, endpoint: str, table: str) -> dict[str, str]:
    return {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": f"kiln-role/{name}",
        "AWS_ENDPOINT_URL": endpoint,
        "KILN_TABLE": table,
        "KILN_BUCKET": table,
        "KILN_LEDGER_DIGEST_KEY": "" if name == "runner" else "bench-digest-key-0123456789abcdef",
        "KILN_STATE_SECRET": "" if name == "runner" else "bench-state-secret-0123456789abcdef",
    }


@contextmanager
def functions(tmp: Path, endpoint: str, table: str, settings: dict[str, str]) -> Iterator[Any]:
    """`mcp` and `runner`, sandboxed, with template.yaml's `settings` in both."""
    runner_env = {**_runtime_env("runner", endpoint, table), **settings, "KILN_RUN_STANDBY": "0"}
    runners = TenantInvoke(tmp / "runner", "runner", runner_env, [endpoint])
    mcp = None
    try:
        mcp_env = {
            **_runtime_env("mcp", endpoint, table),
            **settings,
            "KILN_PUBLIC_ANONYMOUS": "true",
            "KILN_RUNNER_FUNCTION": "kiln-runner",
            "KILN_RUNNER_TENANT": "tool",
            "KILN_RUNNER_ENDPOINT_URL": runners.url,
        }
        mcp = Environment(tmp / "mcp", "mcp", mcp_env, [endpoint, runners.url])
        yield Functions(mcp, runners)
    finally:
        if mcp is not None:
            mcp.close()
        runners.close()
