"""Processes as /proc shows them: parents and states, a tree below a pid, a uid's tasks.

Plain functions of the standard library only: the supervisor loads this module by path when
it runs as the helper script (`kiln.runner.supervisor`), and the runner and the runner
function's sweep import it as usual.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Sequence


def read_stat(pid: str) -> tuple[int, bytes] | None:
    """(ppid, state) of a process from /proc/PID/stat, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    # "pid (comm) state ppid ...": comm may hold spaces and ")", so split after the last ")".
    fields = data[data.rfind(b")") + 2 :].split(b" ", 2)
    if len(fields) < 2:
        return None
    return int(fields[1]), fields[0]


def descendants(root: int) -> list[tuple[int, bytes]]:
    """Every process whose parent chain leads to `root`, as (pid, state)."""
    children: dict[int, list[tuple[int, bytes]]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            stat = read_stat(name)
            if stat is not None:
                children.setdefault(stat[0], []).append((int(name), stat[1]))
    found: list[tuple[int, bytes]] = []
    queue = [root]
    while queue:
        for child in children.get(queue.pop(), ()):
            found.append(child)
            queue.append(child[0])
    return found


def kill_all(pids: Sequence[int]) -> None:
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def user_tasks(uid: int) -> int:
    """Processes and threads whose real uid is `uid` (what RLIMIT_NPROC counts).

    Read from /proc/PID/status, not the owner of /proc/PID: a process that is not dumpable
    (the server, the helper) shows root as that owner.
    """
    count = 0
    for name in os.listdir("/proc"):
        if name.isdigit():
            with (
                contextlib.suppress(OSError, ValueError, KeyError),
                open(f"/proc/{name}/status") as f,
            ):
                fields = dict(line.split(":", 1) for line in f if ":" in line)
                if int(fields["Uid"].split()[0]) == uid:
                    count += int(fields["Threads"])
    return count
