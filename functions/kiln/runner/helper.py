"""The helper: the long-lived process that starts runs (the process design: `supervisor.py`).

One per Runner's interpreter, started once with `python -I -S supervisor.py`. It waits on its
socket for run requests and forks a supervisor for each (`Helper.serve` returns the request
in the forked child, which becomes that run's supervisor). A request marked `direct` is
supervised by the helper itself instead (`Helper.direct`): one fork per run, the script's,
instead of two. The runner sends it only where the helper serves one run at a time under its
own uid with no standby waiting (the runner function, `RunnerSettings.direct_runs`): there
the helper's descendants are that run's processes and nothing else, the same thing a
supervisor's are, so every step of the run (the deadline, the kill of the whole tree, the
report) is the supervisor's own code run in the helper.

Standard library only; loaded by path by the supervisor script, after its siblings.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import json
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from typing import Any

if __package__:
    from kiln.runner import contain, processes
else:  # loaded by path by `supervisor.py`, which has loaded these siblings by path already
    contain, processes = sys.modules["kiln_runner_contain"], sys.modules["kiln_runner_processes"]

# signal's C functions, without the module's wrappers, which make an enum of every number
# they take and give: these calls are made on every run, in the helper and in each forked
# script, where every object touched after the fork costs a copy-on-write page fault.
raw_signal: Any = importlib.import_module("_signal")
MAX_REQUEST_BYTES = 1 << 20
SCRIPT_FDS = 7  # stdin, stdout, stderr, status, private, go, talk
# A server closing its runner says so first: runs under way may end in their own time. A
# socket that closes without it means the server died (`kill -9`): its runs are stopped.
CLOSING = b"closing"

# supervise(request, fds, sock): one run to its end, in this process (a direct run)
Supervise = Callable[[dict[str, Any], list[int], socket.socket], None]


class Helper:
    """Waits for run requests and forks a supervisor for each (or supervises it: `direct`)."""

    def __init__(self, sock: socket.socket, supervise: Supervise | None = None) -> None:
        self.sock = sock
        self.supervisors: set[int] = set()
        self.mark = mark_allowed()
        self.supervise = supervise

    def reap(self, *_: object) -> None:
        """SIGCHLD: reap supervisors; kill anything else that was reparented here."""
        lost_one = False
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            if pid in self.supervisors:
                self.supervisors.discard(pid)
                lost_one = lost_one or not os.WIFEXITED(status)
        if lost_one:  # a supervisor was killed: the orphans of its run are now ours
            self.kill_strays()

    def kill_strays(self) -> None:
        """Kill every descendant that is not a live supervisor or under one."""
        for _ in range(100):
            ours = set(self.supervisors)
            for supervisor in self.supervisors:
                ours.update(pid for pid, _ in processes.descendants(supervisor))
            strays = [pid for pid in processes.living_descendants(os.getpid()) if pid not in ours]
            processes.kill_all(strays)
            for pid in strays:  # the direct children among them are ours to reap
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)
            if not strays:
                return
            time.sleep(0.005)

    def stop_all(self, grace_s: float = 5.0) -> None:
        """Stop every run (each supervisor kills its tree and its uid), then what is left.

        The server is gone (a `kill -9` of `kiln dev` among the ways): a task's script would
        otherwise run on to its end with no one to answer.
        """
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
        for pid in self.supervisors:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGTERM)
        give_up = time.monotonic() + grace_s
        while self.supervisors and time.monotonic() < give_up:
            signal.sigtimedwait({signal.SIGCHLD}, 0.05)
            self.reap()
        processes.kill_all(list(self.supervisors))  # one that did not stop in time
        self.supervisors.clear()
        self.kill_strays()

    def serve(self) -> tuple[dict[str, Any], list[int]] | None:
        """Fork a supervisor per request; in the child, return its request and descriptors."""
        contain.prctl(contain.PR_SET_CHILD_SUBREAPER, 1)
        contain.prctl(contain.PR_SET_DUMPABLE, 0)  # its memory is of no use to a tool's uid
        signal.signal(signal.SIGCHLD, self.reap)
        # A server's stop (SIGTERM) is for a direct run; one that comes after its end is
        # dropped (setting SIG_IGN discards a pending one), never the helper's end.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        gc.freeze()  # forked children's collections then leave the helper's objects (and pages) be
        while True:
            try:
                data, fds, _, _ = socket.recv_fds(self.sock, MAX_REQUEST_BYTES, SCRIPT_FDS)
            except OSError:
                data, fds = b"", []
            if data == CLOSING and not fds:
                return None
            if not data:  # the server died: nothing of its runs may go on without it
                self.stop_all()
                return None
            if len(fds) != SCRIPT_FDS:
                for fd in fds:
                    os.close(fd)
                continue
            request = dict(json.loads(data), mark=self.mark)
            if request.get("direct") and self.supervise is not None and not self.supervisors:
                self.direct(request, fds)
                continue
            # SIGCHLD waits until the new pid is on the list, so a quick exit is not missed.
            raw_signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
            pid = os.fork()
            if pid == 0:
                raw_signal.signal(signal.SIGCHLD, raw_signal.SIG_DFL)
                raw_signal.signal(signal.SIGTERM, raw_signal.SIG_DFL)
                self.sock.close()
                return request, fds
            self.supervisors.add(pid)
            raw_signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})
            for fd in fds:
                os.close(fd)

    def direct(self, request: dict[str, Any], fds: list[int]) -> None:
        """Supervise one run here: SIGCHLD and SIGTERM are the run's while it lasts.

        The supervisor's code cannot fail in the middle of a run and leave the helper
        serving: should it raise, the helper exits as a supervisor would (its run's script
        dies with it, PR_SET_PDEATHSIG; the server sees the run end unreported and starts
        a new helper; the runner function's sweep kills what is left).
        """
        assert self.supervise is not None
        raw_signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD, signal.SIGTERM})
        raw_signal.signal(signal.SIGTERM, raw_signal.SIG_DFL)
        try:
            self.supervise(request, fds, self.sock)
        except BaseException:
            os._exit(1)
        raw_signal.signal(signal.SIGTERM, raw_signal.SIG_IGN)  # a stop that came too late: dropped
        raw_signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD, signal.SIGTERM})


def mark_allowed() -> str:
    """Whether a run's processes can carry the mark: "seccomp", or "none" where the kernel
    refuses it (Lambda, by several reports). Then orphans cannot be told apart by it, and only
    an environment of the run's own (the runner function) finds them all."""
    pid = os.fork()
    if pid == 0:
        try:
            contain.mark_as_run()
        except OSError:
            os._exit(1)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    return "seccomp" if os.waitstatus_to_exitcode(status) == 0 else "none"


def share_static_paths(paths: list[str]) -> None:
    """As root: a mount namespace for the helper where what every run needs is reachable.

    Each run's own namespace is a copy of it, so the interpreter under a closed /root is
    made reachable once here rather than on every run. Where mounts are not allowed each run
    checks instead.
    """
    if os.geteuid() != 0:
        return
    with contextlib.suppress(OSError):
        contain.private_namespace()
        contain.expose(paths, [])
