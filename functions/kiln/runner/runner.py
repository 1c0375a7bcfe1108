"""Run one author script as a child process: deadline, caps, clean environment, whole tree killed.

The server side of a run (see `supervisor.py` for the process design). For each run this
module picks the deadline, prepares the private directory and the environment, hands the
run to the helper process with four pipes (stdin, stdout, stderr, status), feeds stdin,
reads stdout and stderr as they come (bytes past a cap are counted and dropped, so memory
stays flat however much a script prints), and turns the status pipe into a `RunResult`.

The supervisor enforces the deadline itself; the server keeps a backstop timer (deadline +
`kill_grace_s`), and if the supervisor does not answer SIGTERM it kills the tree from here by
walking /proc. A cancelled `run` stops its supervisor the same way before returning.

Nothing here blocks the event loop beyond a few small system calls: pipes are read by
asyncio, and removing the run directory (which may hold large files) happens in a worker
thread. The helper is started with one blocking fork on the first run (about 20 ms).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import os
import signal
import tempfile
import time
import weakref
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kiln.runner import contain, isolation, launcher, supervisor
from kiln.runner.environment import script_environment
from kiln.runner.errors import InvalidArgumentsError, RunnerBusyError
from kiln.runner.isolation import RunRecord, UidPool
from kiln.runner.launcher import PRELOAD, LauncherError, close_quietly, install_dirs
from kiln.runner.limits import RunnerSettings, effective_limits
from kiln.runner.model import LimitSource, RunRequest, RunResult
from kiln.runner.nodejs import find_node
from kiln.runner.pipes import NotStarted, Output, PipeFeeder, Reader, Status, returning

logger = logging.getLogger("kiln.runner")

SCRIPT_NAMES = {"python": "main.py", "node": "main.cjs"}
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
START_TIMEOUT_S = 10.0  # a supervisor reports its pid within milliseconds; this is a backstop
PIPE_DRAIN_S = 1.0  # after the supervisor exits, how long an escaped holder may keep a pipe open
ORPHAN_SETTLE_S = 0.2  # after a supervisor died, how long orphans are looked for


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
        self.settings = settings = settings or RunnerSettings()
        root = contain.can_switch_uid()
        self._uids: UidPool | None = None
        if root and settings.run_uids is not None:
            self._uids = UidPool(*settings.run_uids, settings.uid_lock_dir)
        # Runs sharing one uid could read each other's files and processes: one at a time.
        serial = self._uids is None and settings.serialize_shared_uid_runs
        slots = 1 if serial else settings.max_concurrent_runs
        self._gate = _Gate(slots, settings.max_queue)
        self._own_filters = None if root else isolation.protect_server()
        self._python_dirs = install_dirs(settings.python_executable)
        # One helper process serves every Runner of this process; the last Runner to close
        # (or be collected) stops it.
        self._launcher = launcher.acquire(self.settings.python_executable)
        self._finalizer = weakref.finalize(self, launcher.release, self._launcher)

    def close(self) -> None:
        """Let go of the helper process (the last Runner stops it; started runs finish)."""
        self._finalizer()

    @property
    def helper_pid(self) -> int | None:
        """The pid of the helper that forks supervisors, once started."""
        return self._launcher.pid

    @property
    def running(self) -> int:
        """Runs holding a slot now."""
        return self._gate.running

    @property
    def waiting(self) -> int:
        """Callers queued for a slot now."""
        return self._gate.waiting

    async def run(self, request: RunRequest) -> RunResult:
        """Run one script to completion or to its deadline.

        Raises RunnerBusyError when the queue is full, NodeUnavailableError for a Node tool
        when no Node.js is found, InvalidArgumentsError (a ValueError) for arguments that
        strict JSON cannot carry (NaN, Infinity).
        """
        stdin = _json_arguments(request.arguments)
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
                try:
                    result = await self._run_in_private_dir(request, stdin, deadline)
                except LauncherError as error:
                    result = RunResult(
                        stdout="",
                        stderr="",
                        exit_code=None,
                        timed_out=False,
                        applied_timeout_s=deadline.seconds,
                        duration_s=0.0,
                        limit_source=deadline.source,
                        started=False,
                        runner_error=str(error),
                    )
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
        keep = (str(work_root), *(str(p) for p in self.settings.own_temp_paths))
        record = RunRecord(run_dir, shared_dirs=contain.SHARED_TEMP_DIRS, keep=keep)
        lease = None
        try:
            if self._uids is not None:
                lease = self._uids.acquire()
                record.uid = lease.uid
            elif self.settings.sweep_shared_temp:
                record.before = await asyncio.to_thread(contain.snapshot, record.shared_dirs)
            if request.files:
                await asyncio.to_thread(_write_files, run_dir, request.files)
            script = run_dir / SCRIPT_NAMES[request.language]
            script.write_text(request.code, encoding="utf-8")
            env, private = script_environment(
                request.language, run_dir, interpreter, request.bundle_path, request.extra_env
            )
            order = self._order(request, deadline, interpreter, script, env, record)
            secrets = json.dumps(private).encode()
            try:
                return await self._supervise(request, stdin, secrets, deadline, order, record)
            except NotStarted:
                # The helper died or failed before the script ran: safe to try once more.
                self._launcher.discard()
                return await self._supervise(request, stdin, secrets, deadline, order, record)
        finally:
            await asyncio.to_thread(self._clean_up, record)
            if lease is not None and self._uids is not None:
                self._uids.release(lease)

    def _clean_up(self, record: RunRecord) -> None:
        """In a worker thread: nothing of the run left running or on disk, a working helper."""
        isolation.clean_up(record)
        if record.uid is not None:
            return  # its uid is all it had: killed (by the supervisor, or by clean_up)
        if record.reported and self._launcher.alive():
            return  # the supervisor killed the whole tree, as a subreaper sees it
        # Its supervisor died (a tool may have killed it, and the helper too): the orphans are
        # on their way to the helper or, if that died, to the server. Keep killing marked
        # children of both while the kernel settles them.
        settle_until = time.monotonic() + ORPHAN_SETTLE_S
        while True:
            helper_alive = self._launcher.alive()
            helper = self._launcher.pid
            roots = [os.getpid(), *([helper] if helper is not None and helper_alive else [])]
            isolation.kill_marked(roots, self._own_filters)
            if time.monotonic() > settle_until:
                break
            time.sleep(0.02)
        if not helper_alive:
            if record.supervisor is not None:  # an orphan of the dead helper, now ours
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(record.supervisor, os.WNOHANG)
            self._launcher.discard()
            with contextlib.suppress(LauncherError):
                self._launcher.ensure_started()

    def _order(
        self,
        request: RunRequest,
        deadline: Deadline,
        interpreter: Path,
        script: Path,
        env: dict[str, str],
        record: RunRecord,
    ) -> dict[str, Any]:
        """The helper's instructions for one run (nothing secret: the helper keeps it)."""
        limits = effective_limits(self.settings, request.limits)
        needed = [*self._python_dirs, PRELOAD]
        if request.language == "node":
            needed.append(interpreter)  # one binary: its directory may hold anything
        if request.bundle_path is not None:
            needed.append(request.bundle_path)
        if record.uid is not None:
            watch = "uid"
        else:
            watch = "new" if record.before is not None else "run_dir"
        return {
            "language": request.language,
            "run_dir": str(script.parent),
            "script": str(script),
            "timeout_s": deadline.seconds,
            "env": env,
            "node": str(interpreter),
            "preload": str(PRELOAD),
            "uid": record.uid,
            "quota_bytes": self.settings.disk_quota_bytes,
            "watch": watch,
            "read_only": sorted({os.path.realpath(p) for p in needed}),
            "read_write": [os.path.realpath(p) for p in self.settings.shared_dirs],
            "landlock": self.settings.landlock,
            "tcp_ports": None if self.settings.tcp_ports is None else list(self.settings.tcp_ports),
            "shared_dirs": list(record.shared_dirs),
            "keep": list(record.keep),
            "limits": {
                "memory_bytes": limits.memory_bytes,
                "file_size_bytes": limits.file_size_bytes,
                "open_files": limits.open_files,
                "max_processes": limits.max_processes,
            },
        }

    async def _supervise(
        self,
        request: RunRequest,
        stdin: bytes,
        secrets: bytes,
        deadline: Deadline,
        order: dict[str, Any],
        record: RunRecord,
    ) -> RunResult:
        limits = effective_limits(self.settings, request.limits)
        loop = asyncio.get_running_loop()
        stdout, stderr = Output(limits.stdout_cap_bytes), Output(limits.stderr_cap_bytes)
        readers = [Reader(stdout), Reader(stderr)]
        status = Status()
        stdin_read, stdin_write = os.pipe()
        private_read, private_write = os.pipe()
        pipes = [os.pipe() for _ in range(3)]  # stdout, stderr, status: we read, they write
        # From here on every descriptor of ours is owned by a file object or a feeder, theirs
        # by `theirs`.
        feeders = [PipeFeeder(loop, stdin_write, stdin), PipeFeeder(loop, private_write, secrets)]
        ours_out = [os.fdopen(r, "rb", buffering=0) for r, _ in pipes]
        theirs = [stdin_read, *(w for _, w in pipes), private_read]
        transports: list[asyncio.BaseTransport] = []
        launched = False
        started = time.monotonic()
        try:
            # Readers first: once launched, the status pipe must be read whatever happens next.
            for file, reader in zip(ours_out, [*readers, status], strict=True):
                read_transport, _ = await loop.connect_read_pipe(returning(reader), file)
                transports.append(read_transport)
            try:
                self._launcher.launch(order, theirs)
                launched = True
            finally:
                close_quietly(theirs)
                theirs.clear()  # closed: the numbers may be reused at once, never close again
            for feeder in feeders:
                feeder.start()
            try:
                pid = await asyncio.wait_for(asyncio.shield(status.pid), START_TIMEOUT_S)
            except TimeoutError:
                raise NotStarted() from None  # the helper is stuck; a fresh one will be tried
            record.supervisor = pid
            timed_out = await self._wait(pid, status, deadline)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    asyncio.gather(readers[0].closed, readers[1].closed), PIPE_DRAIN_S
                )
            duration = time.monotonic() - started
        finally:
            close_quietly(theirs)  # still ours if we failed before launching
            if launched and not status.closed.done():
                await self._stop_when_started(status)
            fields = status.fields()
            record.isolation = fields.get("isolation", "")
            record.reported = "outcome" in fields
            for feeder in feeders:
                feeder.close()
            for transport in transports:
                transport.close()
            for file in ours_out:
                file.close()  # a no-op for those a transport already closed
        return self._result(request, stdout, stderr, fields, timed_out, deadline, duration)

    async def _wait(self, pid: int, status: Status, deadline: Deadline) -> bool:
        """Wait for the supervisor; True if it had to be stopped by the server's own timer."""
        # The supervisor enforces the deadline itself; this timer is the backstop.
        backstop = deadline.seconds + self.settings.kill_grace_s
        try:
            await asyncio.wait_for(asyncio.shield(status.closed), backstop)
        except TimeoutError:
            await self._stop(pid, status)
            return True
        return False

    async def _stop_when_started(self, status: Status) -> None:
        """On the way out (cancelled, failed): make sure a launched run is not left running."""
        if not status.pid.done():
            with contextlib.suppress(TimeoutError, LauncherError):
                await asyncio.wait_for(asyncio.shield(status.pid), self.settings.kill_grace_s)
        if not status.pid.done():
            self._launcher.discard()  # a helper that cannot say what it started is replaced
        elif status.pid.exception() is None:
            await self._stop(status.pid.result(), status)

    async def _stop(self, pid: int, status: Status) -> None:
        """Ask the supervisor to kill the tree; if it does not, kill the tree from here."""
        if status.closed.done():
            return  # it has exited: the pid may already belong to someone else
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(asyncio.shield(status.closed), self.settings.kill_grace_s)
        except TimeoutError:
            await asyncio.to_thread(_kill_tree_from, pid)

    def _result(
        self,
        request: RunRequest,
        stdout: Output,
        stderr_output: Output,
        status: dict[str, str],
        server_timed_out: bool,
        deadline: Deadline,
        duration: float,
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
            quota = self.settings.disk_quota_bytes
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
            applied_timeout_s=deadline.seconds,
            duration_s=duration,
            stdout_truncated=stdout.truncated,
            stderr_truncated=stderr_output.truncated,
            stdout_bytes=stdout.total,
            stderr_bytes=stderr_output.total,
            limit_source=deadline.source,
            runner_error=runner_error,
            disk_quota_bytes=quota,
            isolation=status.get("isolation", ""),
            fence=status.get("fence", ""),
        )


def _write_files(run_dir: Path, files: Mapping[str, bytes]) -> None:
    """The tool's own files, where the script finds them (paths were checked on save)."""
    for relative, data in files.items():
        path = run_dir / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def _json_arguments(arguments: Mapping[str, Any]) -> bytes:
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
            "truncated": result.stdout_truncated or result.stderr_truncated,
            "runner_error": result.runner_error,
            "isolation": result.isolation,
        },
    )
