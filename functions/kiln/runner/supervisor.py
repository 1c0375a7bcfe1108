"""The helper process that starts runs, and the per-run supervisor it forks.

Three kinds of process, each with one job:

    server (asyncio) --socket--> helper (one per Runner, long-lived: `helper.py`)
                                   └─ fork ─> supervisor (one per run, child subreaper)
                                                └─ fork ─> script (own session; Python runs
                                                           in place, Node is exec'd)

In the runner function (one run at a time in an environment of its own) the helper is that
run's supervisor itself, running the same code (`supervise_direct`): one fork a run.

Why a supervisor per run. Killing "everything a script started" needs an ancestor that all
of it stays under, even after a double fork or `setsid()`. Linux gives exactly that with
PR_SET_CHILD_SUBREAPER: orphans are reparented to the nearest subreaper ancestor instead of
to init, and Lambda allows the prctl (no cgroups or namespaces needed). One subreaper per run
keeps the processes of concurrent runs apart, so "this run's processes" is simply "this
supervisor's descendants". The supervisor:

1. becomes a child subreaper, blocks SIGCHLD and SIGTERM (handled with sigtimedwait) and
   writes `pid N` to the run's status pipe;
2. forks the script process, which starts its own session, closes the status pipe, applies
   the resource limits and asks to be SIGKILLed if the supervisor dies (PR_SET_PDEATHSIG),
   then waits for the tool's settings on its private pipe before running a line of the
   tool (Node is exec'd first: its preload waits), saying so first on its ready pipe;
3. waits for `go` (the run's deadline in seconds) on its go pipe (passing the script's
   ready byte on as `ready` on the status pipe), then for the script to exit, for the
   deadline, or for SIGTERM from the server. End of file on the go pipe, or `idle_s`
   without it, means the run is not wanted: it is killed unstarted (`discarded`);
4. kills the tree: SIGKILL to the script's process group, then repeatedly walks
   /proc/*/stat for processes whose parent chain leads to it and SIGKILLs them, reaping as
   it goes, until it has no child left. As a subreaper, "no child left" means "no
   descendant left": a surviving descendant would have been reparented to it. When the
   script exits and nothing else runs (the usual case) the first reap already says so and
   /proc is never read;
5. writes `outcome ...` and `leftover N` to the status pipe and exits.

Why a long-lived helper. Starting an interpreter per run would cost a whole Python start
before the script even begins; forking a small, already started interpreter costs about a
millisecond. The helper is started once with `python -I -S` (no site-packages, no user site,
no environment variables read), so a forked Python script sees only the standard library
and its bundle (added with `site.addsitedir`, so the bundle's .pth files work), and runs as
`__main__` in place, unbuffered, as `python -u main.py` would. The helper is a subreaper too:
if a hostile script kills its own supervisor, the orphans land on the helper, which kills
them. It exits when the server closes its socket.

Why `go` is separate from the request. A run can be prepared before it is called: the
supervisor isolates itself and starts the script (a forked interpreter, or Node up to its
preload) and both wait, holding nothing of the call -- not its arguments, secrets or
deadline. The server keeps one such standby per recently called tool (`standby.py`), so a
call pays for none of that; a cold call sends `go` right behind the request.

Requests arrive on a SOCK_SEQPACKET socket: one JSON message per run, with the run's stdin,
stdout, stderr, status, private and go pipe ends attached as file descriptors (SCM_RIGHTS). The
private pipe carries the tool's settings and secrets; only the script process reads it (a
Python script into its own os.environ, Node through `preload.cjs` on fd 3), so they are never
in the helper's memory, in an exec'd environment block (/proc/PID/environ) or in a command line.

Containment (see `contain.py` and the README section "What isolates one tool from another"):
as root the supervisor stays root and the script drops to the run's own uid, inside a mount
namespace with a size-limited tmpfs for its work and temporary directories (or, where mounts
are not allowed, with its disk use watched); after the run every process of that uid is
killed. Every script is marked (no_new_privs plus a seccomp filter) so that its orphans can
be told from the server's own children, and Python scripts are not dumpable.

Known limit: every run forked from one helper shares that helper's hash seed (str hashes
are predictable across runs of one container).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import resource
import select
import signal
import socket
import sys
import time
from typing import Any, NamedTuple, NoReturn

if __package__:
    from kiln.runner import contain, helper, landlock, processes, pyrun
else:  # run by path as the helper (`python -I -S supervisor.py`): load the siblings by path
    import importlib.util

    def _sibling(name: str) -> Any:
        spec = importlib.util.spec_from_file_location(
            f"kiln_runner_{name}", os.path.join(os.path.dirname(__file__), f"{name}.py")
        )
        module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        sys.modules[module.__name__] = module  # found there by the siblings loaded after it
        spec.loader.exec_module(module)  # type: ignore[union-attr]
        return module

    contain = _sibling("contain")
    landlock = _sibling("landlock")
    processes = _sibling("processes")
    pyrun = _sibling("pyrun")
    helper = _sibling("helper")

prctl = contain.prctl
raw_signal = helper.raw_signal  # per run, in the helper and each script: no enum wrappers
living_descendants = processes.living_descendants
kill_all, user_tasks = processes.kill_all, processes.user_tasks
KILL_PATIENCE_S = 5.0  # how long to keep killing before reporting leftovers
MAX_REQUEST_BYTES, CLOSING = helper.MAX_REQUEST_BYTES, helper.CLOSING  # the helper's protocol
TALK_FD_MIN = 10  # the talk pipe's descriptor in the script: clear of 0-3
GO_BYTES = 64  # `go` carries one number
PRIVATE_FD = 3  # where a Node script's preload finds its settings and secrets
READY = b"r"  # what the script writes to its ready pipe once it waits for its call
WATCH_INTERVAL_S = 0.05  # how often disk use is measured when no tmpfs bounds it


# --- the supervisor -------------------------------------------------------------------------


def reap(main: int, statuses: dict[int, int]) -> bool:
    """Reap every exited child; True when no child is left at all."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return True
        if pid == 0:
            return False
        if pid == main:
            statuses[main] = status


def kill_tree(main: int, statuses: dict[int, int]) -> int:
    """Kill every descendant; returns how many could not be killed (normally 0)."""
    if reap(main, statuses):
        return 0
    with contextlib.suppress(OSError):
        os.killpg(main, signal.SIGKILL)
    me = os.getpid()
    give_up = time.monotonic() + KILL_PATIENCE_S
    while True:
        if reap(main, statuses):
            return 0
        alive = living_descendants(me)  # a zombie leader with a live thread among them
        kill_all(alive)
        if time.monotonic() > give_up:
            return len(alive)
        signal.sigtimedwait({signal.SIGCHLD}, 0.005)


class Direct(NamedTuple):
    """A run the helper supervises itself: the script's standard streams (a supervisor
    would have made them its own) and the helper's socket (the script must not hold it)."""

    streams: tuple[int, int, int]
    sock: int


def supervise(
    request: dict[str, Any], status_fd: int, private_fd: int, go_fd: int, talk_fd: int,
    direct: Direct | None = None,
) -> None:  # fmt: skip
    """Run one script to its end or its deadline, kill what it left, report, exit (or, in
    the helper, `direct`: return, holding nothing of the run)."""
    prctl(contain.PR_SET_CHILD_SUBREAPER, 1)
    raw_signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD, signal.SIGTERM})
    unstarted = [status_fd, private_fd, go_fd, talk_fd, *(direct.streams if direct else ())]
    try:
        os.write(status_fd, f"pid {os.getpid()}\n".encode())
    except OSError:  # the server has gone (its end of the status pipe is closed): run nothing
        return leave(direct, 1, unstarted)
    os.umask(0o022)
    try:
        isolation, fence, enforced = fence_for(request, isolate(request))
    except OSError as error:
        os.write(status_fd, f"outcome error {error}\nleftover 0\n".encode())
        return leave(direct, 0, unstarted)
    mark = request.get("mark", "seccomp")
    os.write(status_fd, f"isolation {isolation}\nfence {enforced}\nmark {mark}\n".encode())
    watch = Watch(request, isolation)
    pid, ready = fork_script(request, status_fd, private_fd, go_fd, fence, talk_fd, direct)
    statuses: dict[int, int] = {}
    timeout_s = wait_for_go(go_fd, float(request["idle_s"]), ready, status_fd)
    outcome = (
        "discarded"
        if timeout_s is None
        else wait_out(pid, statuses, watch, time.monotonic() + timeout_s)
    )
    leftover = kill_tree(pid, statuses)
    if request["uid"] is not None:
        contain.kill_uid(request["uid"])  # anything of the uid outside the tree, too
    if not outcome:
        outcome = f"exit {os.waitstatus_to_exitcode(statuses[pid])}"
    with contextlib.suppress(OSError):  # the server may be gone (Helper.stop_all)
        os.write(status_fd, f"outcome {outcome}\nleftover {leftover}\n".encode())
    # The server's answer waits for end of file on these: give it before the exit's own work
    # (unmapping memory, tearing down the run's mount namespace).
    os.close(status_fd)
    if direct is not None:
        os.close(ready)
        return None
    os.closerange(0, 3)
    os._exit(0)


def wait_out(pid: int, statuses: dict[int, int], watch: Watch, give_up: float) -> str:
    """Wait for the script to exit (reaping into `statuses`): '' when it did, else why the
    run ends without it (its deadline, a stop, its quota)."""
    while pid not in statuses:
        left = give_up - time.monotonic()
        if left <= 0:
            return "timeout"
        info = signal.sigtimedwait({signal.SIGCHLD, signal.SIGTERM}, watch.wait(left))
        if info is not None and info.si_signo == signal.SIGTERM:
            return "stopped"
        if info is None and watch.over_quota():
            return f"quota {watch.used}"
        reap(pid, statuses)
    return ""


def leave(direct: Direct | None, code: int, fds: list[int]) -> None:
    """A run that ends before its script starts: a supervisor exits (which closes all it
    holds); the helper lets go of the run's descriptors and serves on."""
    if direct is None:
        os._exit(code)
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def fork_script(
    request: dict[str, Any], status: int, private: int, go: int, fence: int | None, talk: int,
    direct: Direct | None = None,
) -> tuple[int, int]:  # fmt: skip
    """Start the script: its pid, and its ready pipe's read end (open till the run's end)."""
    ready_r, ready_w = os.pipe()
    # RLIMIT_NPROC counts every task of the uid: those there now, and the script (see limits.py).
    tasks = user_tasks(os.geteuid()) + 1 if request["uid"] is None and os.geteuid() else 0
    pid = os.fork()
    if pid == 0:
        os.close(go)  # the script must not read (and so steal) its own deadline
        os.close(ready_r)
        if direct is not None:
            adopt(request, direct)
        start_script(request, status, private, fence, talk, ready_w, tasks)  # never returns
    if direct is not None:
        for fd in direct.streams:
            os.close(fd)  # the script's alone: end of file on its stdout when it is done
    os.close(private)
    os.close(talk)  # the script holds the only write end: end of file when it is done
    os.close(ready_w)
    if fence is not None:
        os.close(fence)
    return pid, ready_r


def wait_for_go(fd: int, idle_s: float, ready_fd: int, status_fd: int) -> float | None:
    """The run's deadline (s) once the server says go, None if never; passes `ready` on."""
    data = b""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    poller.register(ready_fd, select.POLLIN)
    give_up = time.monotonic() + idle_s
    while not data.endswith(b"\n") and len(data) < GO_BYTES:
        left = give_up - time.monotonic()
        events = poller.poll(left * 1000) if left > 0 else []
        if not events:
            break
        if any(ready == ready_fd for ready, _ in events):
            poller.unregister(ready_fd)
            if os.read(ready_fd, 1) == READY:
                with contextlib.suppress(OSError):  # the server may be gone: `go` says so
                    os.write(status_fd, b"ready\n")
        if not any(ready == fd for ready, _ in events):
            continue
        chunk = os.read(fd, GO_BYTES)
        if not chunk:
            break  # the server let go of the run (discarded, or it exited)
        data += chunk
    os.close(fd)
    try:
        return max(0.0, float(data)) if data.endswith(b"\n") else None
    except ValueError:
        return None


def isolate(request: dict[str, Any]) -> str:
    """Prepare the run's uid and file system view: "mounts", "uid" or "shared" (none)."""
    uid = request["uid"]
    if uid is None:
        return "shared"
    contain.kill_uid(uid)  # what an earlier holder of the uid left (a server killed mid-run)
    run_dir = request["run_dir"]
    files = _run_files(run_dir)  # the script and the tool's own files, read before the mount
    try:
        contain.private_mounts(
            run_dir,
            request["quota_bytes"],
            uid,
            request["read_only"],
            request["read_write"],
            request["shared_dirs"],
        )
    except contain.MountsUnavailableError:
        for path in request["read_only"]:
            blocker = contain.blocker(path)
            if blocker is not None:
                raise OSError(
                    f"the run's uid cannot reach {path} ({blocker} is closed to other users) "
                    "and this process may not mount (no CAP_SYS_ADMIN): make it readable to "
                    "all, or install it elsewhere"
                ) from None
        os.chown(run_dir, uid, uid)
        for relative in files:
            _chown_path(run_dir, relative, uid)
        return "uid"
    for relative, data in files.items():  # the fresh mount hides them: write them again
        path = os.path.join(run_dir, relative)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        _chown_path(run_dir, os.path.dirname(relative), uid)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, data)
            os.fchown(fd, uid, uid)
        finally:
            os.close(fd)
    return "mounts"


def fence_for(request: dict[str, Any], isolation: str) -> tuple[str, int | None, str]:
    """The Landlock ruleset the script will enter: (isolation, its descriptor, what it enforces).

    Runs under the server's own uid ("shared") get the file system fence too, and are then
    "landlock"; runs with a uid and mounts of their own get only the network and signal
    fence. Where the kernel has no Landlock nothing changes, and the status says so.
    """
    if not request["landlock"]:
        return isolation, None, ""
    files = isolation == "shared"
    built = landlock.fence(
        request["read_only"],
        [request["run_dir"], *request["read_write"]],
        request["tcp_ports"],
        files=files,
    )
    if built is None:
        return isolation, None, ""
    fd, enforced = built
    return ("landlock" if files else isolation), fd, enforced


def _run_files(run_dir: str) -> dict[str, bytes]:
    """Every file the server put in the run directory, by relative path."""
    found: dict[str, bytes] = {}
    for folder, _, names in os.walk(run_dir):
        for name in names:
            path = os.path.join(folder, name)
            with open(path, "rb") as f:
                found[os.path.relpath(path, run_dir)] = f.read()
    return found


def _chown_path(run_dir: str, relative: str, uid: int) -> None:
    """Give `relative` and each directory on the way to it (below run_dir) to the run's uid."""
    parts = [part for part in relative.split(os.sep) if part]
    for depth in range(1, len(parts) + 1):
        os.chown(os.path.join(run_dir, *parts[:depth]), uid, uid)


class Watch:
    """Measures the run's disk use where no tmpfs bounds it; `over_quota` after each interval."""

    def __init__(self, request: dict[str, Any], isolation: str) -> None:
        self.mode = {"mounts": "", "uid": "uid"}.get(isolation, request["watch"])
        self.quota = int(request["quota_bytes"])
        self.uid = request["uid"] if isolation == "uid" else os.geteuid()
        self.run_dir = request["run_dir"]
        self.shared = request["shared_dirs"]
        self.keep = set(request["keep"])
        # "new": what the server found in the shared places as it prepared the run (None:
        # too much to send, listed here).
        found = request["before"] if self.mode == "new" else []
        if found is None:
            self.before = contain.snapshot(self.shared)
        else:
            self.before = {(path, inode) for path, inode in found}
        self.used = 0

    def wait(self, left: float) -> float:
        return min(left, WATCH_INTERVAL_S) if self.mode else left

    def over_quota(self) -> bool:
        if not self.mode:
            return False
        if self.mode == "uid":
            elsewhere = contain.owned_entries(self.uid, self.shared)
        elif self.mode == "new":
            elsewhere = contain.new_entries(self.before, self.uid, self.shared, self.keep)
        else:  # "run_dir": shared places are not swept, so only the run's own directory counts
            elsewhere = []
        self.used = contain.disk_usage([self.run_dir, *elsewhere])
        return self.used > self.quota


def adopt(request: dict[str, Any], direct: Direct) -> None:
    """In a direct run's script: what `become_supervisor` does in a supervisor's process (the
    streams at 0-2, the run's environment), and the helper's socket and handler let go."""
    os.close(direct.sock)
    raw_signal.signal(signal.SIGCHLD, raw_signal.SIG_DFL)
    for target, fd in enumerate(direct.streams):
        os.dup2(fd, target)
        os.close(fd)
    os.environ.clear()
    os.environ.update(request["env"])


def start_script(
    request: dict[str, Any], status_fd: int, private_fd: int, fence: int | None, talk_fd: int,
    ready_fd: int, tasks: int,
) -> NoReturn:  # fmt: skip
    """In the script's own process: session, limits, uid, fence, then run Python or exec Node."""
    os.setsid()
    os.close(status_fd)
    talk = move_talk(talk_fd)
    ready = move_talk(ready_fd)  # clear of fd 3 too, where Node's private pipe goes
    raw_signal.pthread_sigmask(signal.SIG_SETMASK, set())
    uid = request["uid"]
    set_limits(request["limits"], uid, tasks)
    if uid is not None:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    prctl(contain.PR_SET_PDEATHSIG, signal.SIGKILL)  # after the uid change, which clears it
    with contextlib.suppress(OSError):  # a kernel without seccomp: the uid still separates
        if request.get("mark") == "none":  # the helper found seccomp refused: only the rest
            prctl(contain.PR_SET_NO_NEW_PRIVS, 1)
        else:
            contain.mark_as_run(request.get("unix_sockets", False))
    if fence is not None:
        try:
            landlock.enter(fence)
        except OSError as error:  # reported as it is: the script does not run unfenced
            os.write(2, f"[runner] cannot enter the run's Landlock fence: {error}\n".encode())
            os._exit(126)
    os.chdir(request["run_dir"])
    if request["language"] == "python":
        prctl(contain.PR_SET_DUMPABLE, 0)  # no other process of this uid may read its memory
        # Everything that runs none of the tool's code is done before its call arrives.
        main, code = pyrun.load_python(request["run_dir"], request["script"])
        pyrun.signal_ready(ready, READY)
        os.environ.update(read_private(private_fd))
        os.environ["KILN_TALK_FD"] = str(talk)
        pyrun.run_python(main, code, request["script"], request["env"].get("PYTHONPATH"))
    node = request["node"]
    # Python starts with SIGPIPE and SIGXFSZ ignored, and exec keeps ignored signals ignored.
    raw_signal.signal(signal.SIGPIPE, raw_signal.SIG_DFL)
    raw_signal.signal(signal.SIGXFSZ, raw_signal.SIG_DFL)
    if private_fd != PRIVATE_FD:
        os.dup2(private_fd, PRIVATE_FD)
        os.close(private_fd)
    os.set_inheritable(PRIVATE_FD, True)
    os.set_inheritable(ready, True)  # the preload writes its byte and closes it
    fds = {"KILN_PRIVATE_FD": str(PRIVATE_FD), "KILN_TALK_FD": str(talk)}
    env = dict(request["env"], **fds, KILN_READY_FD=str(ready))
    argv = [node, "--require", request["preload"], request["script"]]
    try:
        os.execve(node, argv, env)  # noqa: S606
    except OSError as exc:
        os.write(2, f"cannot start Node.js at {node}: {exc.strerror}\n".encode())
        os._exit(127)


def move_talk(fd: int) -> int:
    """The talk (or ready) pipe at a descriptor of its own (>= 10), inherited by what the
    script execs, so that moving the private pipe to fd 3 for Node can never overwrite it."""
    talk = fcntl.fcntl(fd, fcntl.F_DUPFD, TALK_FD_MIN)
    os.close(fd)
    return talk


def read_private(fd: int) -> dict[str, str]:
    """The tool's settings and secrets, from the pipe only this process reads.

    A call always sends at least `{}`: end of file with nothing before it means the run was
    discarded (or the server is gone), and the tool's code must not run at all.
    """
    chunks = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    os.close(fd)
    data = b"".join(chunks)
    if not data:
        os._exit(0)
    return dict(json.loads(data))


def set_limits(limits: dict[str, int], run_uid: int | None, tasks: int) -> None:
    """The run's resource limits; `tasks`: the uid's tasks now, the script's among them."""
    memory, file_size = limits["memory_bytes"], limits["file_size_bytes"]
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_DATA, (memory, memory))
    resource.setrlimit(resource.RLIMIT_FSIZE, (file_size, file_size))
    resource.setrlimit(resource.RLIMIT_NOFILE, (limits["open_files"], limits["open_files"]))
    if run_uid is not None:
        # The run's own uid has no other process: the limit is exact.
        total = limits["max_processes"]
    elif os.geteuid() != 0:
        # RLIMIT_NPROC counts all tasks of the user (see limits.py); root ignores it anyway.
        total = tasks + limits["max_processes"]
    else:
        return
    resource.setrlimit(resource.RLIMIT_NPROC, (total, total))


# --- the helper's side -----------------------------------------------------------------------


def become_supervisor(request: dict[str, Any], fds: list[int]) -> None:
    stdin, stdout, stderr, status, private, go, talk = fds
    for target, fd in enumerate((stdin, stdout, stderr)):
        os.dup2(fd, target)
        os.close(fd)
    os.environ.clear()
    os.environ.update(request["env"])
    supervise(request, status, private, go, talk)


def supervise_direct(request: dict[str, Any], fds: list[int], sock: socket.socket) -> None:
    """One run supervised by the helper itself (`helper.Helper.direct`): the same steps, and
    what `become_supervisor` does for a supervisor done in the script's process instead."""
    stdin, stdout, stderr, status, private, go, talk = fds
    supervise(request, status, private, go, talk, Direct((stdin, stdout, stderr), sock.fileno()))


def main() -> None:
    sock = socket.socket(fileno=int(sys.argv[1]))
    helper.share_static_paths(json.loads(sys.argv[2]) if len(sys.argv) > 2 else [])
    work = helper.Helper(sock, supervise_direct).serve()
    if work is None:
        return
    become_supervisor(*work)


if __name__ == "__main__":
    main()
