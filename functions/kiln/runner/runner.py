"""Run one author script as a child process: deadline, caps, clean environment, whole tree killed.

The server side of a run. Each run gets a supervisor process (see `supervisor.py` for the
process-tree design); this module picks the deadline, prepares the private directory and
the environment, feeds stdin, reads stdout and stderr as they come through an asyncio
subprocess protocol (bytes past a cap are counted and dropped, so memory stays flat however
much a script prints), and turns the supervisor's status line into a `RunResult`.

Nothing here blocks the event loop for longer than a few small file operations: the child
is spawned and read by asyncio, and removing the run directory (which may hold large files)
happens in a worker thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import signal
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from kiln.runner import supervisor
from kiln.runner.environment import script_environment
from kiln.runner.errors import RunnerBusyError
from kiln.runner.limits import EffectiveLimits, RunnerSettings, effective_limits
from kiln.runner.model import LimitSource, RunRequest, RunResult
from kiln.runner.nodejs import find_node

logger = logging.getLogger("kiln.runner")

SUPERVISOR = Path(supervisor.__file__)
SCRIPT_NAMES = {"python": "main.py", "node": "main.cjs"}
ESM_SIGNS = ("Cannot use import statement outside a module", "ERR_REQUIRE_ESM")
ESM_HINT = "[hint] Kiln runs Node tools as CommonJS: use require(), not import"
PIPE_DRAIN_S = 1.0  # after the supervisor exits, how long an escaped holder may keep a pipe open


@dataclass(frozen=True)
class Deadline:
    seconds: float
    source: LimitSource


def deadline_for(request: RunRequest, settings: RunnerSettings, waited_s: float) -> Deadline:
    """min(tool timeout, server maximum, time left in the invocation minus the answer margin)."""
    candidates: list[tuple[float, LimitSource]] = [
        (request.timeout_s, "tool"),
        (settings.max_timeout_s, "server"),
    ]
    if request.time_left_s is not None:
        left = request.time_left_s - waited_s - settings.answer_margin_s
        candidates.append((left, "invocation"))
    seconds, source = min(candidates, key=lambda c: c[0])
    return Deadline(max(0.0, seconds), source)


class _Output:
    """One capped stream: keeps the first `cap` bytes, counts the rest."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.kept = bytearray()
        self.total = 0

    def feed(self, data: bytes) -> None:
        room = self.cap - len(self.kept)
        if room > 0:
            self.kept += data[:room]
        self.total += len(data)

    @property
    def truncated(self) -> bool:
        return self.total > len(self.kept)

    def text(self) -> str:
        data = bytes(self.kept)
        if self.truncated:
            # The cap may fall inside a UTF-8 sequence: drop the broken tail, not replace it.
            data = _trim_partial(data)
        return data.decode("utf-8", errors="replace")


def _trim_partial(data: bytes) -> bytes:
    """`data` without a UTF-8 sequence cut off at its end."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 != 0x80:  # the last lead (or ASCII) byte
            need = (
                1 if byte < 0x80 else 2 if byte >> 5 == 0b110 else 3 if byte >> 4 == 0b1110 else 4
            )
            return data if need <= back else data[:-back]
    return data


class _RunProtocol(asyncio.SubprocessProtocol):
    def __init__(self, limits: EffectiveLimits) -> None:
        self.stdout = _Output(limits.stdout_cap_bytes)
        self.stderr = _Output(limits.stderr_cap_bytes)
        loop = asyncio.get_running_loop()
        self.exited: asyncio.Future[None] = loop.create_future()
        self.pipes_closed: asyncio.Future[None] = loop.create_future()
        self._open = {1, 2}

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        (self.stdout if fd == 1 else self.stderr).feed(data)

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        self._open.discard(fd)
        if not self._open and not self.pipes_closed.done():
            self.pipes_closed.set_result(None)

    def process_exited(self) -> None:
        if not self.exited.done():
            self.exited.set_result(None)


class _Gate:
    """At most `slots` runs at once and `queue` callers waiting; the next caller is refused."""

    def __init__(self, slots: int, queue: int) -> None:
        self.slots = slots
        self.queue = queue
        self.running = 0
        self.waiting = 0
        self._semaphore: asyncio.Semaphore | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        semaphore = self._semaphore_for_this_loop()
        if semaphore.locked() and self.waiting >= self.queue:
            raise RunnerBusyError(self.running, self.waiting)
        self.waiting += 1
        try:
            await semaphore.acquire()
        finally:
            self.waiting -= 1
        self.running += 1
        try:
            yield
        finally:
            self.running -= 1
            semaphore.release()

    def _semaphore_for_this_loop(self) -> asyncio.Semaphore:
        # A Runner may outlive an event loop (Mangum runs each invocation on the loop it finds).
        loop = asyncio.get_running_loop()
        if self._semaphore is None or (self._loop is not loop and self.running == 0):
            self._semaphore = asyncio.Semaphore(self.slots)
            self._loop = loop
        return self._semaphore


class Runner:
    """Runs scripts under `settings`; `run` is safe to call from many tasks at once."""

    def __init__(self, settings: RunnerSettings | None = None) -> None:
        self.settings = settings or RunnerSettings()
        self._gate = _Gate(self.settings.max_concurrent_runs, self.settings.max_queue)

    async def run(self, request: RunRequest) -> RunResult:
        """Run one script to completion or to its deadline.

        Raises RunnerBusyError when the queue is full, NodeUnavailableError for a Node tool
        when no Node.js is found, ValueError for arguments that are not JSON (NaN, ...).
        """
        stdin = json.dumps(dict(request.arguments), allow_nan=False).encode()
        queued_at = time.monotonic()
        async with self._gate.slot():
            waited = time.monotonic() - queued_at
            deadline = deadline_for(request, self.settings, waited)
            if deadline.seconds <= 0:
                result = RunResult(
                    stdout="",
                    stderr="",
                    exit_code=None,
                    timed_out=True,
                    applied_timeout_s=0.0,
                    duration_s=0.0,
                    limit_source=deadline.source,
                    started=False,
                )
            else:
                result = await self._run_in_private_dir(request, stdin, deadline)
        _log(request, result)
        return result

    async def _run_in_private_dir(
        self, request: RunRequest, stdin: bytes, deadline: Deadline
    ) -> RunResult:
        if request.language == "node":
            interpreter = find_node(self.settings.node_binary)
        else:
            interpreter = self.settings.python_executable
        work_root = self.settings.work_root or Path(tempfile.gettempdir())
        run_dir = Path(tempfile.mkdtemp(prefix="kiln-run-", dir=work_root))  # mode 0700
        try:
            script = run_dir / SCRIPT_NAMES[request.language]
            script.write_text(request.code, encoding="utf-8")
            env = script_environment(
                request.language, run_dir, interpreter, request.bundle_path, request.extra_env
            )
            return await self._supervise(request, stdin, deadline, run_dir, script, env)
        finally:
            await asyncio.to_thread(shutil.rmtree, run_dir, ignore_errors=True)

    async def _supervise(
        self,
        request: RunRequest,
        stdin: bytes,
        deadline: Deadline,
        run_dir: Path,
        script: Path,
        env: dict[str, str],
    ) -> RunResult:
        limits = effective_limits(self.settings, request.limits)
        limit_arg = (
            f"{limits.memory_bytes},{limits.file_size_bytes},"
            f"{limits.open_files},{limits.max_processes}"
        )
        argv = [
            str(self.settings.python_executable),
            "-I",
            "-S",
            str(SUPERVISOR),
            "",  # the status pipe's fd, filled in below
            repr(deadline.seconds),
            request.language,
            str(run_dir),
            str(script),
            limit_arg,
        ]
        if request.language == "node":
            argv.append(str(find_node(self.settings.node_binary)))
        status_read, status_write = os.pipe()
        argv[4] = str(status_write)
        loop = asyncio.get_running_loop()
        started = time.monotonic()
        try:
            transport, protocol = await loop.subprocess_exec(
                lambda: _RunProtocol(limits),
                *argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=env,
                cwd=run_dir,
                start_new_session=True,
                pass_fds=(status_write,),
            )
        finally:
            os.close(status_write)
        try:
            stdin_pipe = transport.get_pipe_transport(0)
            assert isinstance(stdin_pipe, asyncio.WriteTransport)
            stdin_pipe.write(stdin)
            stdin_pipe.close()  # closes once written; a script that never reads is fine
            timed_out = await self._wait(transport, protocol, deadline)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(protocol.pipes_closed), PIPE_DRAIN_S)
            duration = time.monotonic() - started
            status = _read_status(status_read)
        finally:
            os.close(status_read)
            if transport.get_returncode() is None:
                await self._stop(transport, protocol)
            transport.close()
        return self._result(request, protocol, status, timed_out, deadline, duration)

    async def _wait(
        self,
        transport: asyncio.SubprocessTransport,
        protocol: _RunProtocol,
        deadline: Deadline,
    ) -> bool:
        """Wait for the supervisor; True if it had to be stopped by the server's own timer."""
        # The supervisor enforces the deadline itself; this timer is the backstop.
        backstop = deadline.seconds + self.settings.kill_grace_s
        try:
            await asyncio.wait_for(asyncio.shield(protocol.exited), backstop)
        except TimeoutError:
            await self._stop(transport, protocol)
            return True
        return False

    async def _stop(self, transport: asyncio.SubprocessTransport, protocol: _RunProtocol) -> None:
        """Ask the supervisor to kill the tree; if it does not, kill the tree from here."""
        with contextlib.suppress(ProcessLookupError):
            transport.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(asyncio.shield(protocol.exited), self.settings.kill_grace_s)
        except TimeoutError:
            pid = transport.get_pid()
            await asyncio.to_thread(_kill_tree_from, pid)
            with contextlib.suppress(ProcessLookupError):
                transport.kill()

    def _result(
        self,
        request: RunRequest,
        protocol: _RunProtocol,
        status: dict[str, str],
        server_timed_out: bool,
        deadline: Deadline,
        duration: float,
    ) -> RunResult:
        outcome = status.get("outcome", "")
        timed_out = server_timed_out or outcome == "timeout"
        exit_code: int | None = None
        stderr = protocol.stderr.text()
        if outcome.startswith("exit "):
            exit_code = int(outcome.split()[1])
        elif outcome.startswith("error ") or (not outcome and not timed_out):
            exit_code = 1
            stderr += f"\n[runner] the supervisor failed: {outcome or 'no status'}"
        elif outcome == "stopped" and not timed_out:
            exit_code = -signal.SIGTERM
        if status.get("leftover", "0") != "0":
            logger.warning(
                "run left processes behind",
                extra={"tool": request.label, "leftover": status["leftover"]},
            )
        if request.language == "node" and any(sign in stderr for sign in ESM_SIGNS):
            stderr = stderr.rstrip("\n") + "\n" + ESM_HINT + "\n"
        return RunResult(
            stdout=protocol.stdout.text(),
            stderr=stderr,
            exit_code=None if timed_out else exit_code,
            timed_out=timed_out,
            applied_timeout_s=deadline.seconds,
            duration_s=duration,
            stdout_truncated=protocol.stdout.truncated,
            stderr_truncated=protocol.stderr.truncated,
            stdout_bytes=protocol.stdout.total,
            stderr_bytes=protocol.stderr.total,
            limit_source=deadline.source,
        )


def _read_status(fd: int) -> dict[str, str]:
    """The supervisor's status lines ("exit 7", "timeout", "leftover 0") as a dict."""
    os.set_blocking(fd, False)
    data = b""
    with contextlib.suppress(BlockingIOError):
        while chunk := os.read(fd, 4096):
            data += chunk
    status: dict[str, str] = {}
    lines = data.decode(errors="replace").splitlines()
    if lines:
        status["outcome"] = lines[0]
    for line in lines[1:]:
        key, _, value = line.partition(" ")
        status[key] = value
    return status


def _kill_tree_from(root: int) -> None:
    """Backstop when the supervisor itself is stuck or dead: kill its descendants, then it."""
    give_up = time.monotonic() + 2.0
    while time.monotonic() < give_up:
        alive = [pid for pid, state in supervisor.descendants(root) if state != b"Z"]
        if not alive:
            break
        for pid in alive:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.005)
    with contextlib.suppress(OSError):
        os.kill(root, signal.SIGKILL)


def _log(request: RunRequest, result: RunResult) -> None:
    logger.info(
        "tool run %s",
        "timed out" if result.timed_out else f"exit {result.exit_code}",
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
            "truncated": result.stdout_truncated or result.stderr_truncated,
        },
    )
