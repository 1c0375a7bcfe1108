"""The server's handle on the helper process that forks supervisors (see `supervisor.py`)."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kiln.runner import supervisor

SUPERVISOR = Path(supervisor.__file__)
PRELOAD = Path(__file__).with_name("preload.cjs")
HELPER_ENV = {"LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "PATH": "/usr/local/bin:/usr/bin:/bin"}


def install_dirs(executable: Path) -> list[Path]:
    """The installation an interpreter needs: its prefix, and the real one behind a link."""
    dirs = [executable.parent.parent]
    real = Path(os.path.realpath(executable)).parent.parent
    if real != dirs[0]:
        dirs.append(real)
    if executable == Path(sys.executable):
        dirs.extend(Path(p) for p in {sys.prefix, sys.base_prefix})
    return [d for d in dirs if d != Path("/")]


def static_reads(executable: Path) -> set[str]:
    """What every run of `executable` reads, resolved once (the interpreter and the preload do
    not move while a helper forked from them serves; resolving them cost ~16 lstat a run)."""
    return {os.path.realpath(p) for p in [*install_dirs(executable), PRELOAD]}


class LauncherError(Exception):
    """The helper process could not take a run."""


class Launcher:
    """Starts the helper on first use, restarts it if it died, stops it on `close`."""

    def __init__(self, python: Path) -> None:
        self.python = python
        self._process: subprocess.Popen[bytes] | None = None
        self._socket: socket.socket | None = None
        self._lock = threading.Lock()  # runs may be launched from more than one event loop

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def launch(self, request: dict[str, Any], fds: Sequence[int]) -> None:
        """Hand one run to the helper.

        `fds` are the script's stdin, stdout, stderr, status and private pipe ends.
        """
        payload = json.dumps(request).encode()
        if len(payload) > supervisor.MAX_REQUEST_BYTES:
            raise LauncherError("the run request is too large (its environment exceeds 1 MiB)")
        with self._lock:
            for attempt in range(2):
                sock = self._ensure_started_locked()
                try:
                    socket.send_fds(sock, [payload], list(fds))
                    return
                except (BrokenPipeError, ConnectionResetError, BlockingIOError) as error:
                    self._kill_locked()  # dead, or so stuck that its socket is full
                    if attempt == 1:
                        raise LauncherError(
                            f"the runner's helper process failed: {error}"
                        ) from error

    def alive(self) -> bool:
        """False once a started helper has died (nothing started counts as alive)."""
        return self._process is None or self._process.poll() is None

    def ensure_started(self) -> None:
        with self._lock:
            self._ensure_started_locked()

    def discard(self) -> None:
        """Drop the current helper; the next launch starts a new one."""
        with self._lock:
            self._kill_locked()

    def close(self) -> None:
        with self._lock:
            self._stop_locked()

    def _ensure_started_locked(self) -> socket.socket:
        if self._process is not None and self._process.poll() is None and self._socket:
            return self._socket
        self._kill_locked()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with theirs:
            try:
                # What every run needs, made reachable once in the helper's own namespace.
                static = sorted(static_reads(self.python))
                argv = [str(self.python), "-I", "-S", str(SUPERVISOR), str(theirs.fileno())]
                self._process = subprocess.Popen(
                    [*argv, json.dumps(static)],
                    pass_fds=(theirs.fileno(),),
                    stdin=subprocess.DEVNULL,
                    env=HELPER_ENV,
                    start_new_session=True,
                )
            except OSError as error:
                ours.close()
                raise LauncherError(
                    f"cannot start the runner's helper with {self.python}: {error.strerror} "
                    "(check RunnerSettings.python_executable)"
                ) from error
        ours.setblocking(False)
        self._socket = ours
        return ours

    def _stop_locked(self) -> None:
        if self._socket is not None:
            with contextlib.suppress(OSError):  # a helper that died cannot be told
                self._socket.send(supervisor.CLOSING)  # runs under way may end
            self._socket.close()  # the helper exits when it sees the socket close
            self._socket = None
        process, self._process = self._process, None
        if process is not None:
            try:
                process.wait(timeout=2)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def _kill_locked(self) -> None:
        """Drop a helper that died or hangs, without waiting on it politely."""
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
        self._stop_locked()


_shared: dict[Path, tuple[Launcher, int]] = {}
_shared_lock = threading.Lock()


def acquire(python: Path) -> Launcher:
    """The process-wide launcher for `python`: one helper serves every Runner of a process."""
    with _shared_lock:
        launcher, users = _shared.get(python, (None, 0))
        if launcher is None:
            launcher = Launcher(python)
        _shared[python] = (launcher, users + 1)
        return launcher


def start_early(python: Path) -> None:
    """Start the process-wide helper for `python` before any Runner exists (the runner
    function's init: it boots while Kiln's modules load); the first `acquire` takes it."""
    with _shared_lock:
        launcher, users = _shared.get(python, (None, 0))
        if launcher is None:
            launcher = Launcher(python)
            _shared[python] = (launcher, users)
    launcher.ensure_started()


def release(launcher: Launcher) -> None:
    """One Runner is done with `launcher`; the last one stops its helper."""
    with _shared_lock:
        shared, users = _shared.get(launcher.python, (None, 0))
        if shared is not launcher:
            launcher.close()
            return
        if users > 1:
            _shared[launcher.python] = (launcher, users - 1)
            return
        del _shared[launcher.python]
    launcher.close()


def close_quietly(fds: Sequence[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)
