"""Run one author script as a child process: deadline, caps, clean environment, whole tree killed.

The server side of a run (see `supervisor.py` for the process design). For each run this
module picks the deadline, prepares the private directory and the environment, hands the
run to the helper process with its pipes (stdin, stdout, stderr, status, talk), feeds stdin,
reads stdout and stderr as they come (bytes past a cap are counted and dropped, so memory
stays flat however much a script prints), and turns the status pipe into a `RunResult`.

The supervisor enforces the deadline itself; the server keeps a backstop timer (deadline +
`kill_grace_s`), and if the supervisor does not answer SIGTERM it kills the tree from here by
walking /proc. A cancelled `run` stops its supervisor the same way before returning. Nothing
here blocks the event loop beyond a few small system calls: pipes are read by asyncio, and
removing the run directory (which may hold large files) happens in a worker thread. The
helper is started with one blocking fork (about 20 ms), by `start_helper` or the first run.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import signal
import tempfile
import time
import weakref
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

from kiln.runner import afterwards, contain, isolation, landlock, launcher, peers, processes
from kiln.runner.environment import script_environment, tool_settings
from kiln.runner.isolation import RunRecord, UidPool
from kiln.runner.launcher import PRELOAD, LauncherError, close_quietly, static_reads
from kiln.runner.limits import RunnerSettings, effective_limits
from kiln.runner.model import LimitSource, RunRequest, RunResult
from kiln.runner.nodejs import find_node
from kiln.runner.pipes import NotStarted, Output, PipeFeeder, Reader, Status, returning
from kiln.runner.results import json_arguments, log_run, run_result
from kiln.runner.shipped import write_run_files
from kiln.runner.slots import SlotGate
from kiln.runner.standby import Prepared, Standbys, standby_key
from kiln.runner.talk import TalkReader, talk_environment

logger = logging.getLogger("kiln.runner")

SCRIPT_NAMES = {"python": "main.py", "node": "main.cjs"}
START_TIMEOUT_S = 10.0  # a supervisor reports its pid within milliseconds; this is a backstop
PIPE_DRAIN_S = 1.0  # after the supervisor exits, how long an escaped holder may keep a pipe open
ORPHAN_SETTLE_S = 0.2  # after a supervisor died, how long orphans are looked for
Done = TypeVar("Done")


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
        self._gate = SlotGate(slots, settings.max_queue)
        self._own_filters = None if root else isolation.protect_server()
        self._static_reads = static_reads(settings.python_executable)
        self._shared_writes = [os.path.realpath(p) for p in settings.shared_dirs]
        # One helper process serves every Runner of this process; the last one closed stops it.
        self._launcher = launcher.acquire(self.settings.python_executable)
        # Runs under the server's uid fenced by Landlock can write only their own directory
        # and the shared ones: nothing of theirs can be in /tmp to sweep.
        # No Landlock in the kernel: no fence asked of the helper, no TCP ports sent per run.
        self._landlock = settings.landlock and landlock.abi() > 0
        fenced = self._uids is None and self._landlock
        # Without either, what a run created directly in /tmp is found by being new: swept.
        self._sweeps = settings.sweep_shared_temp and self._uids is None and not fenced
        self._discard = _discarder(self._uids)
        self._standbys: Standbys | None = None
        self._spare: ThreadPoolExecutor | None = None
        self._pending: deque[tuple[Prepared | None, RunRequest, Path, str | None]] = deque()
        self._closed = False
        self.runs_from_standby = 0  # runs that started from a standby (tests, benchmarks)
        # Standbys only where runs are fenced from each other (see standby.py).
        if settings.standby_runs > 0 and (self._uids is not None or fenced):
            self._standbys = Standbys(settings.standby_runs, settings.standby_idle_s, self._discard)
            self._spare = ThreadPoolExecutor(1, thread_name_prefix="kiln-standby")
        # The helper's descendants are then this one run's, as a supervisor's are (helper.py).
        direct = self._uids is None and serial and self._standbys is None
        self.direct = settings.dedicated and direct  # no supervisor process per run
        self._finalizer = weakref.finalize(
            self, _shut_down, self._spare, self._standbys, self._launcher
        )

    def close(self) -> None:
        """Discard the standbys, let go of the helper (the last Runner stops it)."""
        self._closed = True  # runs still ending clean up after themselves, and leave no standby
        self._hand_over()
        self._finalizer()

    @property
    def standbys(self) -> int:
        """Prepared runs waiting for a call of their tool now."""
        return len(self._standbys) if self._standbys is not None else 0

    def settle(self) -> None:
        """Wait until the standbys asked for so far are made (tests and benchmarks)."""
        if self._spare is not None:
            self._hand_over()
            self._spare.submit(lambda: None).result()

    @property
    def standby_capable(self) -> bool:
        """Whether this runner keeps standbys at all (KILN_RUN_STANDBY > 0, runs fenced)."""
        return self._standbys is not None

    def prepare(self, request: RunRequest) -> bool:
        """Have a standby wait for `request`'s tool now (blocking until its script waits for
        the call: Node started, Python compiled), so that its next call starts at once; False
        where there are none."""
        if self._standbys is None or self._closed:
            return False
        interpreter = self._interpreter(request)
        self._replenish(request, interpreter, self._key(request, interpreter), ready=True)
        return True

    def discard_standbys(self) -> None:
        """Discard every waiting standby now (blocking)."""
        self.settle()
        if self._standbys is not None:
            self._standbys.clear()

    def start_helper(self) -> str | None:
        """Start the helper before the first run; why it could not (the run tries again)."""
        try:
            self._launcher.ensure_started()
        except LauncherError as error:
            return str(error)
        return None

    @property
    def helper_pid(self) -> int | None:
        """The pid of the helper that forks supervisors, once started."""
        return self._launcher.pid

    @property
    def running(self) -> int:
        """Runs holding a slot now."""
        return self._gate.running

    def from_run(self, client_port: int, server_port: int) -> bool:
        """True when a loopback connection to this server was opened by a run (a uid per run
        only; see `kiln.runner.peers`)."""
        if self._uids is None or self.settings.run_uids is None:
            return False
        uid = peers.connection_uid(client_port, server_port)
        low, high = self.settings.run_uids
        return uid is not None and low <= uid < high

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
        stdin = json_arguments(request.arguments)
        queued_at = time.monotonic()
        async with self._gate.slot(request.shares, request.from_run):
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
                    result = await self._run_prepared(request, stdin, deadline)
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
        self.runs_from_standby += result.standby
        log_run(request, result)
        return result

    async def _run_prepared(
        self, request: RunRequest, stdin: bytes, deadline: Deadline
    ) -> RunResult:
        interpreter = self._interpreter(request)
        key = None
        prepared = None
        if self._standbys is not None and self._spare is not None:
            key = self._key(request, interpreter)
            prepared = self._standbys.take(key)
            if prepared is not None and not self._standbys.fresh(prepared):
                self._spare.submit(self._finish, prepared)  # discarded off the event loop
                prepared = None
        try:
            if prepared is None:
                prepared = await self._prepare_now(request, interpreter)
            try:
                return await self._supervise(request, stdin, deadline, prepared)
            except NotStarted:
                # The helper (or a standby) failed before the script ran: try once more, cold.
                if prepared.key is None:
                    self._launcher.discard()
                failed, prepared = prepared, None
                await self._blocking(self._finish, failed)
                prepared = await self._prepare_now(request, interpreter)
                return await self._supervise(request, stdin, deadline, prepared)
        finally:
            if self._spare is not None and not self._closed:
                # The supervisor has killed the run's processes before reporting; preparing the
                # next run, then removing this one's files, start once the answer has been sent
                # (kiln.runner.afterwards): no thread competes with it for the GIL, nor with the
                # run's start or end (as a preparation during the run did: bench/README).
                self._pending.append((prepared, request, interpreter, key))
                afterwards.later(self._hand_over)
            elif prepared is not None:
                await self._blocking(self._finish, prepared)

    def _interpreter(self, request: RunRequest) -> Path:
        if request.language == "node":
            return find_node(self.settings.node_binary)
        return self.settings.python_executable

    def _key(self, request: RunRequest, interpreter: Path) -> str:
        files = sorted(
            (name, hashlib.sha256(data).hexdigest()) for name, data in request.files.items()
        )
        limits = effective_limits(self.settings, request.limits)
        return standby_key(
            request.language,
            request.code.encode(),
            files,
            str(request.bundle_path),
            str(interpreter),
            limits.__dict__,
        )

    async def _prepare_now(self, request: RunRequest, interpreter: Path) -> Prepared:
        if request.files or self._sweeps:  # may be large, or list /tmp: not on the event loop
            return await self._blocking(self._prepare, request, interpreter)
        return self._prepare(request, interpreter)

    async def _blocking(self, call: Callable[..., Done], *args: Any) -> Done:
        """File work that may take a while: in a thread, but where the event loop serves this
        runner's one run and nothing else (`dedicated`), whose hop would cost more than it
        spares."""
        if self.settings.dedicated:
            return call(*args)
        return await asyncio.to_thread(call, *args)

    def _hand_over(self) -> None:
        """Give the spare thread what runs left to do (also on `settle` and `close`, should
        their loop have closed before it ran this)."""
        while self._pending and self._spare is not None:
            try:
                item = self._pending.popleft()
            except IndexError:  # taken by another caller
                return
            try:
                self._spare.submit(self._after, *item)
            except RuntimeError:  # shut down (the runner closed): clean up here
                self._after(*item)

    def _after(
        self, prepared: Prepared | None, request: RunRequest, interpreter: Path, key: str | None
    ) -> None:
        """In the spare thread: the tool's next run first (a call may follow at once)."""
        try:
            if key is not None and not self._closed:
                self._replenish(request, interpreter, key)
        finally:
            if prepared is not None:
                self._finish(prepared)

    def _replenish(
        self, request: RunRequest, interpreter: Path, key: str, *, ready: bool = False
    ) -> None:
        """A standby for the next call of this tool, unless one waits already; with `ready`,
        only once its script waits for the call (a call meanwhile starts cold)."""
        assert self._standbys is not None
        waits = self._standbys.has(key)
        if waits and (not ready or self._standbys.ensure_ready(key, START_TIMEOUT_S)):
            return
        try:
            prepared = self._prepare(request, interpreter)
        except (LauncherError, OSError, ValueError) as error:
            logger.warning(
                "could not prepare a standby run",
                extra={"tool": request.label, "error": str(error)},
            )
            return
        if ready and not prepared.wait_ready(START_TIMEOUT_S):
            logger.warning("a standby did not get ready", extra={"tool": request.label})
            if not prepared.waiting:  # it ended before its call: the call starts cold
                self._finish(prepared)
                return
        prepared.key = key
        self._standbys.put(prepared)

    def _prepare(self, request: RunRequest, interpreter: Path) -> Prepared:
        """A private directory, a uid, the pipes; the run handed to the helper, unstarted."""
        work_root = self.settings.work_root or Path(tempfile.gettempdir())
        run_dir = Path(tempfile.mkdtemp(prefix="kiln-run-", dir=work_root))  # mode 0700
        keep = (str(work_root), *(str(p) for p in self.settings.own_temp_paths))
        record = RunRecord(run_dir, shared_dirs=contain.SHARED_TEMP_DIRS, keep=keep)
        lease = None
        theirs: list[int] = []
        ours: list[int] = []
        try:
            if self._uids is not None:
                lease = self._uids.acquire()
                record.uid = lease.uid
            elif self._sweeps:
                record.before = contain.snapshot(record.shared_dirs)
            write_run_files(run_dir, request.files, request.language)  # and kiln_tools/
            script = run_dir / SCRIPT_NAMES[request.language]
            script.write_text(request.code, encoding="utf-8")
            env = script_environment(request.language, run_dir, interpreter, request.bundle_path)
            order = self._order(request, interpreter, script, env, record)
            for _ in range(7):  # stdin, private, go: they read; stdout, stderr, status, talk: we
                read, write = os.pipe()
                ours.append(write if len(ours) < 3 else read)
                theirs.append(read if len(theirs) < 3 else write)
            stdin_r, private_r, go_r, stdout_w, stderr_w, status_w, talk_w = theirs
            self._launcher.launch(
                order, [stdin_r, stdout_w, stderr_w, status_w, private_r, go_r, talk_w]
            )
        except BaseException:
            close_quietly(ours)
            close_quietly(theirs)
            isolation.clean_up(record)
            if lease is not None and self._uids is not None:
                self._uids.release(lease)
            raise
        close_quietly(theirs)
        o = ours  # stdin, private, go (we write); stdout, stderr, status, talk (we read)
        return Prepared(record, lease, o[0], o[1], o[2], o[3], o[4], o[5], o[6], env)

    def _finish(self, prepared: Prepared) -> None:
        """In a worker thread: a run that has ended (or never will) leaves nothing behind,
        and the helper works."""
        self._discard(prepared)  # its processes (as its uid), its files, its uid
        self._settle_orphans(prepared.record)

    def _settle_orphans(self, record: RunRecord) -> None:
        """Without a uid of its own, a run whose supervisor died left orphans: kill them."""
        if record.uid is not None:
            return  # its uid is all it had: killed (by the supervisor, or by clean_up)
        if record.reported and self._launcher.alive():
            return  # the supervisor killed the whole tree, as a subreaper sees it
        if record.mark == "none":  # said, not hidden (the runner function sweeps instead)
            logger.warning("a run's supervisor died; no seccomp mark tells its orphans apart")
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
        interpreter: Path,
        script: Path,
        env: dict[str, str],
        record: RunRecord,
    ) -> dict[str, Any]:
        """The helper's instructions for one run (nothing secret: the helper keeps it)."""
        limits = effective_limits(self.settings, request.limits)
        needed: list[Path] = []
        if request.language == "node":
            needed.append(interpreter)  # one binary: its directory may hold anything
        if request.bundle_path is not None:
            needed.append(request.bundle_path)
        ports = self.settings.tcp_ports
        if record.uid is not None:
            watch = "uid"
        else:
            watch = "new" if record.before is not None else "run_dir"
        return {
            "direct": self.direct,
            "language": request.language,
            "run_dir": str(script.parent),
            "script": str(script),
            "idle_s": self.settings.standby_idle_s,
            "env": env,
            "node": str(interpreter),
            "preload": str(PRELOAD),
            "uid": record.uid,
            "quota_bytes": self.settings.disk_quota_bytes,
            "watch": watch,
            "read_only": sorted(self._static_reads | {os.path.realpath(p) for p in needed}),
            "read_write": list(self._shared_writes),
            "landlock": self._landlock,
            "unix_sockets": self.settings.unix_sockets,
            "tcp_ports": list(ports) if self._landlock and ports is not None else None,
            "shared_dirs": list(record.shared_dirs),
            "keep": list(record.keep),
            "before": contain.sendable(record.before),  # the shared places' "new" listing
            "limits": {
                "memory_bytes": limits.memory_bytes,
                "file_size_bytes": limits.file_size_bytes,
                "open_files": limits.open_files,
                "max_processes": limits.max_processes,
            },
        }

    async def _supervise(
        self, request: RunRequest, stdin: bytes, deadline: Deadline, prepared: Prepared
    ) -> RunResult:
        """Start a prepared run (`go`), feed it, read it, and wait for its end."""
        limits = effective_limits(self.settings, request.limits)
        loop = asyncio.get_running_loop()
        stdout, stderr = Output(limits.stdout_cap_bytes), Output(limits.stderr_cap_bytes)
        readers = [Reader(stdout), Reader(stderr)]
        status = Status(prepared.status_head)  # with what was read while it waited
        talk = TalkReader(request.heard)
        record = prepared.record
        private = tool_settings(request.extra_env, prepared.env)
        private.update(talk_environment(request))
        stdin_w, private_w, go, *reads = prepared.take()
        # From here on every descriptor is owned by a file object, a feeder, or `go`.
        ours_out = [os.fdopen(fd, "rb", buffering=0) for fd in reads]
        feeders = [
            PipeFeeder(loop, stdin_w, stdin),
            PipeFeeder(loop, private_w, json.dumps(private).encode()),
        ]
        transports: list[asyncio.BaseTransport] = []
        started = time.monotonic()
        try:
            # Readers first: once started, the status pipe must be read whatever happens next.
            protocols: list[asyncio.Protocol] = [*readers, status, talk]
            for file, reader in zip(ours_out, protocols, strict=True):
                read_transport, _ = await loop.connect_read_pipe(returning(reader), file)
                transports.append(read_transport)
            pid = await _go(go, feeders, status, deadline)
            record.supervisor = pid
            timed_out = await self._wait(pid, status, deadline)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    asyncio.gather(readers[0].closed, readers[1].closed, talk.closed),
                    PIPE_DRAIN_S,
                )
            duration = time.monotonic() - started
        finally:
            try:
                if not status.closed.done():
                    await self._stop_when_started(status)
            finally:  # even when cancelled again while stopping (clean-up kills what is left)
                fields = status.fields()
                record.isolation = fields.get("isolation", "")
                record.mark = fields.get("mark", "")
                record.reported = "outcome" in fields
                for feeder in feeders:
                    feeder.close()
                for transport in transports:
                    transport.close()
                for file in ours_out:
                    file.close()  # a no-op for those a transport already closed
        if fields.get("outcome") == "discarded":
            raise NotStarted()  # a standby that gave up waiting just before `go`
        result = run_result(
            request, stdout, stderr, fields, timed_out, deadline.seconds, deadline.source,
            duration, self.settings.disk_quota_bytes, talk,
        )  # fmt: skip
        return replace(result, standby=True, ready=prepared.ready) if prepared.key else result

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
            await asyncio.to_thread(processes.kill_tree_from, pid)


async def _go(go: int, feeders: list[PipeFeeder], status: Status, deadline: Deadline) -> int:
    """Send `go` (the deadline), start the feeders, and wait for the supervisor's pid."""
    try:
        os.write(go, f"{deadline.seconds!r}\n".encode())
    except BrokenPipeError:
        raise NotStarted() from None  # a standby that gave up waiting
    finally:
        close_quietly([go])
    for feeder in feeders:
        feeder.start()
    try:
        return await asyncio.wait_for(asyncio.shield(status.pid), START_TIMEOUT_S)
    except TimeoutError:
        raise NotStarted() from None  # the helper is stuck; a fresh one will be tried


def _discarder(uids: UidPool | None) -> Callable[[Prepared], None]:
    """How a run that has ended, or a standby that will never run, is cleaned up (holds no
    reference to the Runner, so that standbys can use it)."""

    def discard(prepared: Prepared) -> None:
        prepared.let_go()  # a no-op for a run that was started
        isolation.clean_up(prepared.record)
        if prepared.lease is not None and uids is not None:
            uids.release(prepared.lease)
            prepared.lease = None

    return discard


def _shut_down(
    spare: ThreadPoolExecutor | None, standbys: Standbys | None, helper: launcher.Launcher
) -> None:
    if spare is not None:
        spare.shutdown(wait=True)
    if standbys is not None:
        standbys.close()
    launcher.release(helper)
