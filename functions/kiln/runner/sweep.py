"""Between two runs in an environment of its own: kill everything but the runtime.

Where the kernel refuses seccomp (Lambda, by several reports), a run's processes carry no
mark, and an orphan of a tool cannot be told from a process of the server's own. The runner
function does not need to tell them apart: its environment holds the runtime (this process,
its ancestors, the helper it started, and whatever ran before the first run: `census`) and
one run at a time, so after every run whatever
else runs is the run's, whatever the run did to its supervisor. `kill_all_but` kills it by
walking /proc, and `litter` finds the files it left in the shared temporary directories.

Standard library only, like `contain.py`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Collection, Iterable

from kiln.runner import contain, processes
from kiln.runner.processes import descendants, read_stat

PATIENCE_S = 5.0


def ancestors(pid: int) -> set[int]:
    """`pid`'s parent chain, up to (not including) 0."""
    found: set[int] = set()
    while pid > 0 and pid not in found:
        found.add(pid)
        stat = read_stat(str(pid))
        if stat is None:
            break
        pid = stat[0]
    return found


def started(pid: int) -> int | None:
    """When a process started (clock ticks since boot): with its pid, who it is."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
        return int(data[data.rfind(b")") + 2 :].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def census() -> frozenset[tuple[int, int | None]]:
    """(pid, start time) of every process there is before any run: the runtime's companions
    (a Lambda extension, a telemetry daemon), spared by every sweep."""
    return frozenset((pid, started(pid)) for pid in _pool())


def _pool() -> Iterable[int]:
    if os.geteuid() == 0:
        return [pid for pid, _ in descendants(os.getpid())]
    me = os.getuid()
    return [pid for pid in processes.pids() if me in processes.uids_of(pid)[:3]]


def candidates(keep: Collection[int], before: Collection[tuple[int, int | None]] = ()) -> list[int]:
    """Live processes that are neither kept, an ancestor of this one, nor there `before`.

    Unprivileged (Lambda): every process of this uid, wherever its parent chain leads.
    As root (`kiln dev`, a test without the Lambda profile): only this process's descendants,
    so that a root process never touches the rest of the machine.
    """
    spared = ancestors(os.getpid()) | set(keep)
    return [
        pid
        for pid in _pool()
        if pid not in spared and processes.alive(pid) and (pid, started(pid)) not in before
    ]


def kill_all_but(
    keep: Collection[int],
    before: Collection[tuple[int, int | None]] = (),
    patience_s: float = PATIENCE_S,
) -> tuple[int, int]:
    """SIGKILL every candidate until none is left; (killed, still alive after patience).

    Reaps this process's own children among them (an orphan reparented to it).
    """
    killed: set[int] = set()
    give_up = time.monotonic() + patience_s
    while True:
        alive = candidates(keep, before)
        if not alive or time.monotonic() > give_up:
            return len(killed), len(alive)
        for pid in alive:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
        for pid in alive:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
        time.sleep(0.005)


def litter(before: set[tuple[str, int]], keep: Collection[str]) -> list[str]:
    """What this uid created in the shared temporary directories since `before`, less `keep`."""
    return contain.new_entries(before, os.geteuid(), contain.SHARED_TEMP_DIRS, keep)
