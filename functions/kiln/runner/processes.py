"""Processes as /proc shows them: who is alive, parents, a tree below a pid, a uid's tasks.

A process is a thread group, and it is alive while any of its threads is. Its leader's
`/proc/PID/stat` is not enough: a leader that ends with the raw `exit` system call (not
`exit_group`) reads `Z` while the group's other threads run on, and stays unreapable until
they end. Every kill loop of the runner asks `alive` (or `group_state`), so a zombie leader
with a live thread is killed like any other process: SIGKILL sent to its pid ends every
thread of the group.

Plain functions of the standard library only: the supervisor loads this module by path when
it runs as the helper script (`kiln.runner.supervisor`), and the runner and the runner
function's sweep import it as usual.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator, Sequence

DEAD = (b"Z", b"X")  # exited (a zombie waiting to be reaped), or on its way out
GONE = b"X"  # what a process that is not there at all reads as


def _state(data: bytes) -> tuple[int, bytes] | None:
    # "pid (comm) state ppid ...": comm may hold spaces and ")", so split after the last ")".
    fields = data[data.rfind(b")") + 2 :].split(b" ", 2)
    if len(fields) < 2:
        return None
    return int(fields[1]), fields[0][:1]


def _leader_stat(pid: int | str) -> tuple[int, bytes] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return _state(f.read())
    except (OSError, ValueError):
        return None


def _threads_state(pid: int | str) -> bytes:
    """The state of a live thread of `pid`'s group, or Z when none is."""
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{task}/stat", "rb") as f:
                    found = _state(f.read())
            except (OSError, ValueError):
                continue
            if found is not None and found[1] not in DEAD:
                return found[1]
    return b"Z"


def read_stat(pid: int | str) -> tuple[int, bytes] | None:
    """(ppid, state) of the thread group `pid` leads, or None when it is gone.

    The state is the leader's, but a leader that has exited while another thread of its
    group runs gives that thread's state: dead (Z, X) only when every thread is.
    """
    found = _leader_stat(pid)
    if found is None or found[1] not in DEAD:
        return found
    return found[0], _threads_state(pid)


def group_state(pid: int | str) -> bytes:
    """The state of the thread group `pid` leads (see `read_stat`); X when it is gone."""
    found = read_stat(pid)
    return GONE if found is None else found[1]


def alive(pid: int | str) -> bool:
    """True while any thread of `pid`'s group is alive, whatever its leader's state."""
    return group_state(pid) not in DEAD


def pids() -> Iterator[int]:
    """Every thread group (process) there is: /proc lists their leaders, dead or alive."""
    for name in os.listdir("/proc"):
        if name.isdigit():
            yield int(name)


def descendants(root: int) -> list[tuple[int, bytes]]:
    """Every process whose parent chain leads to `root`, as (pid, state of its group)."""
    children: dict[int, list[tuple[int, bytes]]] = {}
    for pid in pids():
        stat = read_stat(pid)
        if stat is not None:
            children.setdefault(stat[0], []).append((pid, stat[1]))
    found: list[tuple[int, bytes]] = []
    queue = [root]
    while queue:
        for child in children.get(queue.pop(), ()):
            found.append(child)
            queue.append(child[0])
    return found


def living_descendants(root: int) -> list[int]:
    """The descendants of `root` that are alive (a zombie leader with a live thread is)."""
    return [pid for pid, state in descendants(root) if state not in DEAD]


def kill_all(pids: Sequence[int]) -> None:
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def kill_tree_from(root: int, patience_s: float = 2.0) -> None:
    """Kill `root`'s descendants, then it: the server's backstop when a run's supervisor is
    stuck or dead."""
    give_up = time.monotonic() + patience_s
    while time.monotonic() < give_up:
        alive = living_descendants(root)
        if not alive:
            break
        kill_all(alive)
        time.sleep(0.005)
    with contextlib.suppress(OSError):
        os.kill(root, signal.SIGKILL)


def uids_of(pid: int | str) -> tuple[int, ...]:
    """(real, effective, saved, filesystem) uids of a process; () when it is gone."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"Uid:"):
                    return tuple(int(v) for v in line.split()[1:5])
    except (OSError, ValueError):
        return ()
    return ()


def processes_of_uids(low: int, high: int) -> list[int]:
    """Live processes (thread groups with a live thread) with any uid in [low, high)."""
    return [pid for pid in pids() if any(low <= uid < high for uid in uids_of(pid)) and alive(pid)]


def kill_uid_from_outside(uid: int, patience_s: float = 5.0) -> int:
    """Kill every process of `uid` by walking /proc (for multi-threaded callers: the server).

    Returns how many were still alive when patience ran out (normally 0).
    """
    give_up = time.monotonic() + patience_s
    while True:
        found = processes_of_uids(uid, uid + 1)
        if not found or time.monotonic() > give_up:
            return len(found)
        kill_all(found)
        time.sleep(0.005)


def user_tasks(uid: int) -> int:
    """Processes and threads whose real uid is `uid` (what RLIMIT_NPROC counts).

    Read from /proc/PID/status, not the owner of /proc/PID: a process that is not dumpable
    (the server, the helper) shows root as that owner.
    """
    count = 0
    for pid in pids():
        try:
            with open(f"/proc/{pid}/status", "rb") as f:
                status = f.read()
            # Only the two lines it needs: this runs before every run's fork.
            real = int(status.split(b"\nUid:", 1)[1].split(None, 1)[0])
            if real == uid:
                count += int(status.split(b"\nThreads:", 1)[1].split(None, 1)[0])
        except (OSError, ValueError, IndexError):
            continue
    return count
