"""The per-run supervisor: a small process between the server and one author script.

Why a separate process. Killing "everything a script started" needs an ancestor that every
such process stays under, even after a double fork or `setsid()`. Linux gives exactly that
with PR_SET_CHILD_SUBREAPER: orphans are reparented to the nearest subreaper ancestor
instead of to init. Lambda allows the prctl (no cgroups, no namespaces needed). Making the
server itself the subreaper would mix the orphans of concurrent runs (and of anything else
the server starts) in one heap; one supervisor per run keeps each run's processes apart, so
"this run's processes" is simply "this supervisor's descendants".

What it does:

1. becomes a child subreaper, blocks SIGCHLD/SIGTERM (handled with sigtimedwait, no handlers);
2. forks the script process, which starts its own session (its pid is its session and group
   id), closes the status pipe, applies the resource limits and asks to be killed if the
   supervisor dies (PR_SET_PDEATHSIG);
3. waits for the script to exit, for the deadline, or for SIGTERM from the server;
4. kills the tree: SIGKILL to the script's process group, then repeatedly walks
   /proc/*/stat for processes whose parent chain leads here and SIGKILLs them, reaping as it
   goes, until it has no child left. As a subreaper, "no child left" means "no descendant
   left": any surviving descendant would have been reparented here. When the script exits
   and nothing else is running (the usual case) the first reap already says so, and /proc
   is never read;
5. writes one status line to the server's pipe and exits 0.

A Python tool does not start a second interpreter: the forked child runs the script in the
supervisor's own fresh interpreter (`python -I -S` plus the bundle directory added with
`site.addsitedir`, so the server's site-packages and the user site stay out and the bundle's
.pth files work). That keeps a Python call close to one bare interpreter start. A Node tool
execs the Node binary on `main.cjs` from the child.

This file is run as a script by `python -I -S`, so it imports only built-in modules
(`posix`, `_signal`, `_ctypes`, `resource`): its start-up time is part of every call.
Usage: supervisor.py STATUS_FD TIMEOUT_S LANGUAGE RUN_DIR SCRIPT LIMITS [NODE_BINARY]
where LIMITS is `memory,file_size,open_files,max_processes` in bytes / counts.

Threat model: this stops ordinary and careless scripts (daemons, setsid, fork bombs, runaway
output). A hostile script running as the same user can still SIGKILL its supervisor; then
the server's backstop (walking /proc from the supervisor's pid) still finds most of the tree.
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # built in; `signal` costs ~2 ms to import
import posix
import sys
import time

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
KILL_PATIENCE_S = 5.0  # how long to keep killing before reporting leftovers

SIGKILL: int = _signal.SIGKILL
SIGTERM: int = _signal.SIGTERM
SIGCHLD: int = _signal.SIGCHLD


def prctl(option: int, arg: int) -> int:
    """Call libc prctl(2) through the built-in `_ctypes` (importing `ctypes` costs ~3 ms)."""
    import _ctypes

    class CInt(_ctypes._SimpleCData):  # type: ignore[type-arg]
        _type_ = "i"

    class CFunction(_ctypes.CFuncPtr):
        _flags_ = _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_USE_ERRNO
        _restype_ = CInt

    libc = _ctypes.dlopen(None, _ctypes.RTLD_LOCAL)  # type: ignore[arg-type]  # None: the program
    function = CFunction(_ctypes.dlsym(libc, "prctl"))
    return int(function(option, arg, 0, 0, 0))


def read_stat(pid: str) -> tuple[int, bytes] | None:
    """(ppid, state) of a process from /proc/PID/stat, or None when it is gone."""
    try:
        fd = posix.open(f"/proc/{pid}/stat", posix.O_RDONLY)
    except OSError:
        return None
    try:
        data = posix.read(fd, 1024)
    except OSError:
        return None
    finally:
        posix.close(fd)
    # "pid (comm) state ppid ...": comm may hold spaces and ")", so split after the last ")".
    fields = data[data.rfind(b")") + 2 :].split(b" ", 2)
    if len(fields) < 2:
        return None
    return int(fields[1]), fields[0]


def descendants(root: int) -> list[tuple[int, bytes]]:
    """Every live process whose parent chain leads to `root`, as (pid, state)."""
    children: dict[int, list[tuple[int, bytes]]] = {}
    for name in posix.listdir("/proc"):
        if not name.isdigit():
            continue
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


def reap(main: int, statuses: dict[int, int]) -> bool:
    """Reap every exited child; True when no child is left at all."""
    while True:
        try:
            pid, status = posix.waitpid(-1, posix.WNOHANG)
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
    try:  # noqa: SIM105 - contextlib costs start-up time here
        posix.killpg(main, SIGKILL)
    except OSError:
        pass
    me = posix.getpid()
    give_up = time.monotonic() + KILL_PATIENCE_S
    while True:
        if reap(main, statuses):
            return 0
        alive = [pid for pid, state in descendants(me) if state not in (b"Z", b"X")]
        for pid in alive:
            try:  # noqa: SIM105
                posix.kill(pid, SIGKILL)
            except OSError:
                pass
        if time.monotonic() > give_up:
            return len(alive)
        _signal.sigtimedwait({SIGCHLD}, 0.005)


def set_limits(limits: str) -> None:
    import resource

    memory, file_size, open_files, max_processes = (int(v) for v in limits.split(","))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_DATA, (memory, memory))
    resource.setrlimit(resource.RLIMIT_FSIZE, (file_size, file_size))
    resource.setrlimit(resource.RLIMIT_NOFILE, (open_files, open_files))
    uid = posix.geteuid()
    if uid != 0:
        # RLIMIT_NPROC counts all tasks of the user (see limits.py); root ignores it anyway.
        total = user_tasks(uid) + max_processes
        resource.setrlimit(resource.RLIMIT_NPROC, (total, total))


def user_tasks(uid: int) -> int:
    count = 0
    for name in posix.listdir("/proc"):
        if name.isdigit():
            try:
                if posix.stat(f"/proc/{name}").st_uid == uid:
                    count += len(posix.listdir(f"/proc/{name}/task"))
            except OSError:
                pass
    return count


def run_python(run_dir: str, script: str) -> None:
    """Run the script as `__main__` in this (freshly forked) interpreter, as `python -u` would."""
    import _io

    sys.argv[:] = [script]
    sys.path[:0] = [run_dir]
    bundle = posix.environ.get(b"PYTHONPATH", b"").decode()
    if bundle:
        import site

        sys.path.insert(1, bundle)
        site.addsitedir(bundle)  # already on the path: this only runs the bundle's .pth files
    sys.dont_write_bytecode = True
    sys.stdin = _io.TextIOWrapper(
        _io.FileIO(0, "r", closefd=False), encoding="utf-8", errors="strict"
    )
    sys.stdout = _io.TextIOWrapper(
        _io.FileIO(1, "w", closefd=False), encoding="utf-8", errors="strict", write_through=True
    )
    sys.stderr = _io.TextIOWrapper(
        _io.FileIO(2, "w", closefd=False),
        encoding="utf-8",
        errors="backslashreplace",
        write_through=True,
    )
    main = type(sys)("__main__")
    main.__file__ = script
    sys.modules["__main__"] = main
    try:
        with open(script, "rb") as source:
            code = compile(source.read(), script, "exec")
        exec(code, main.__dict__)  # noqa: S102 - running the author's script is the job
    except SystemExit:
        raise
    except BaseException as exc:
        tb = exc.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename != script:
            tb = tb.tb_next  # hide the supervisor's own frames, as a plain `python main.py` would
        sys.excepthook(type(exc), exc.with_traceback(tb), tb)
        raise SystemExit(1) from None


def start_script(status_fd: int, language: str, run_dir: str, script: str, limits: str) -> None:
    """In the forked child: become the script."""
    posix.setsid()
    posix.close(status_fd)
    _signal.pthread_sigmask(_signal.SIG_SETMASK, set())
    prctl(PR_SET_PDEATHSIG, SIGKILL)
    set_limits(limits)
    posix.chdir(run_dir)
    if language == "python":
        run_python(run_dir, script)
        return
    node = sys.argv[7]
    # Python starts with SIGPIPE and SIGXFSZ ignored, and exec keeps ignored signals ignored.
    _signal.signal(_signal.SIGPIPE, _signal.SIG_DFL)
    _signal.signal(_signal.SIGXFSZ, _signal.SIG_DFL)
    try:
        posix.execv(node, [node, script])
    except OSError as exc:
        posix.write(2, f"cannot start Node.js at {node}: {exc.strerror}\n".encode())
        posix._exit(127)


def main() -> None:
    status_fd, timeout_s = int(sys.argv[1]), float(sys.argv[2])
    language, run_dir, script, limits = sys.argv[3:7]
    if prctl(PR_SET_CHILD_SUBREAPER, 1) != 0:
        posix.write(status_fd, b"error cannot become a child subreaper\n")
        return
    _signal.pthread_sigmask(_signal.SIG_BLOCK, {SIGCHLD, SIGTERM})
    pid = posix.fork()
    if pid == 0:
        start_script(status_fd, language, run_dir, script, limits)
        return
    statuses: dict[int, int] = {}
    outcome = ""
    give_up = time.monotonic() + timeout_s
    while pid not in statuses:
        left = give_up - time.monotonic()
        if left <= 0:
            outcome = "timeout"
            break
        info = _signal.sigtimedwait({SIGCHLD, SIGTERM}, left)
        if info is not None and info.si_signo == SIGTERM:
            outcome = "stopped"
            break
        reap(pid, statuses)
    leftover = kill_tree(pid, statuses)
    if not outcome:
        outcome = f"exit {posix.waitstatus_to_exitcode(statuses[pid])}"
    posix.write(status_fd, f"{outcome}\nleftover {leftover}\n".encode())


if __name__ == "__main__":
    main()
