"""The server's side of containment: a uid per run, and cleaning up after every run.

As root, each run holds one uid of `RunnerSettings.run_uids` for its whole life. A uid is
held with an flock on a file in `uid_lock_dir` (root-only), so two Kiln servers on one
machine never hand out the same uid; the kernel drops the lock if the server dies, and the
next holder first kills whatever the uid still runs.

Without root every run shares the server's uid. Then the server marks itself not dumpable
(a tool cannot read its environment or memory) and becomes a child subreaper: a tool that
kills its supervisor and the helper leaves orphans that land on the server, which finds them
by the mark every tool process carries (see `contain.mark_as_run`) and kills them. Processes
of the server's own (the helper, an emulator, a bundle build) carry no mark and are never
touched, so a test run on a developer's machine kills nothing of theirs.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import random
import shutil
import signal
import stat
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kiln.runner import contain, processes
from kiln.runner.launcher import LauncherError
from kiln.runner.processes import descendants


class NoRunUidError(LauncherError):
    """Every uid of the configured range is held (by this or another Kiln server)."""


@dataclass
class UidLease:
    uid: int
    fd: int


class UidPool:
    """Run uids [first, end), each held by at most one run on this machine at a time."""

    def __init__(self, first: int, end: int, lock_dir: Path) -> None:
        if not 0 < first < end:
            raise ValueError(f"run uid range {first}-{end} is empty or includes root")
        self.first, self.end = first, end
        self.lock_dir = lock_dir
        self._next = random.randrange(first, end)  # servers on one machine start apart
        self._held: set[int] = set()
        self._ready = False
        self._lock = threading.Lock()  # runs are prepared on the event loop and in a thread

    def acquire(self) -> UidLease:
        with self._lock:
            return self._acquire()

    def _acquire(self) -> UidLease:
        self._prepare()
        size = self.end - self.first
        for step in range(size):
            uid = self.first + (self._next - self.first + step) % size
            if uid in self._held:
                continue
            fd = os.open(self.lock_dir / str(uid), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            self._held.add(uid)
            self._next = uid + 1
            return UidLease(uid, fd)
        raise NoRunUidError(
            f"every run uid in {self.first}-{self.end - 1} is in use: widen KILN_RUN_UIDS"
        )

    def release(self, lease: UidLease) -> None:
        with self._lock:
            self._held.discard(lease.uid)
            os.close(lease.fd)

    def _prepare(self) -> None:
        if self._ready:
            return
        try:
            self.lock_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            info = self.lock_dir.stat()
        except OSError as error:
            raise NoRunUidError(
                f"cannot keep run uid locks in {self.lock_dir}: {error.strerror}"
            ) from None
        if info.st_uid != 0 or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            raise NoRunUidError(f"{self.lock_dir} must belong to root and be writable by root only")
        self._ready = True


def protect_server() -> int | None:
    """Without root: make the server unreadable to tools and the heir of their orphans.

    Returns how many seccomp filters the server itself carries (a tool's processes carry
    more), or None when /proc does not say (then orphans cannot be told apart, and only the
    helper's descendants are killed).
    """
    contain.prctl(contain.PR_SET_DUMPABLE, 0)
    with contextlib.suppress(OSError):
        contain.prctl(contain.PR_SET_CHILD_SUBREAPER, 1)
    return contain.seccomp_filters("self")


def children_of(pid: int) -> list[int]:
    found: list[int] = []
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError), open(f"/proc/{pid}/task/{task}/children") as f:
                found.extend(int(child) for child in f.read().split())
    return found


def kill_marked(roots: Sequence[int], own_filters: int | None, patience_s: float = 5.0) -> int:
    """Kill every marked process among `roots`' children and all their descendants.

    Marked children of this process are reaped (they are orphans the server inherited).
    Returns how many were still alive when patience ran out (normally 0).
    """
    me = os.getpid()
    give_up = time.monotonic() + patience_s
    while True:
        targets: list[int] = []
        for root in roots:
            for child in children_of(root):
                if contain.is_marked(child, own_filters):
                    targets.append(child)
                    targets.extend(pid for pid, _ in descendants(child))
        alive = [pid for pid in targets if processes.alive(pid)]
        for pid in alive:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        for pid in targets:
            if me in roots:
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)  # only our children can be reaped: others fail
        if not alive or time.monotonic() > give_up:
            return len(alive)
        time.sleep(0.005)


@dataclass
class RunRecord:
    """What the server knows of one run when it cleans up after it."""

    run_dir: Path
    uid: int | None = None
    isolation: str = ""  # "mounts", "uid", "shared" once the supervisor says
    mark: str = ""  # "seccomp", or "none" where the kernel refused the run mark
    reported: bool = False  # the supervisor reported an outcome (and so killed the tree)
    supervisor: int | None = None
    before: set[tuple[str, int]] | None = None  # shared temp entries at the start (no root)
    keep: tuple[str, ...] = ()  # the server's own entries there, never swept
    shared_dirs: tuple[str, ...] = field(default=contain.SHARED_TEMP_DIRS)


def clean_up(record: RunRecord) -> None:
    """After a run, whatever happened to it: no process of its uid, none of its files."""
    if record.uid is not None:
        if not record.reported:  # its supervisor died before killing what the run started
            processes.kill_uid_from_outside(record.uid)
        if record.isolation != "mounts":  # a private tmpfs vanishes with its last process
            contain.remove(contain.owned_entries(record.uid, record.shared_dirs))
    elif record.before is not None:
        contain.remove(
            contain.new_entries(record.before, os.geteuid(), record.shared_dirs, record.keep)
        )
    shutil.rmtree(record.run_dir, ignore_errors=True)
