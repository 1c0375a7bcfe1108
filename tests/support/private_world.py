"""A command in a world of its own: `python private_world.py [--see PATH]... -- ARGV...`.

The runner function's sweep (`kiln.runner.sweep`) takes the environment to be its own, as it
is on Lambda: after every run it removes whatever its uid created in the shared temporary
directories, and kills every process of the environment it did not know before. In a test
run, the machine is shared with other test workers, whose fresh `/tmp/kiln-run-...` a sweep
run in their midst would remove. This gives a test's sweep the environment Lambda gives it:

- new mount and pid namespaces (as root; otherwise first a user namespace mapping this uid
  to itself, so the command still runs as this uid without any capability);
- a fresh `/proc`, and a fresh tmpfs on each of `contain.SHARED_TEMP_DIRS`, so the sweep
  sees only what the command and its children create there;
- each `--see` path under one of them (a checkout, a venv under /tmp) bound back on top;
- its first process (pid 1) reaps orphans and exits with ARGV's status; the kernel then
  kills whatever is left in the namespace, and it dies with its parent.

Where no such world can be made (not root, and user namespaces refused), it exits with
`NO_WORLD` and says why on stderr: the test skips rather than sweep the machine.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

from kiln.runner import contain

CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID = 0x00020000, 0x10000000, 0x20000000
PR_SET_PDEATHSIG = 1
NO_WORLD = 77
_libc = ctypes.CDLL(None, use_errno=True)


def _unshare(flags: int) -> None:
    if _libc.unshare(flags) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"unshare: {os.strerror(errno)}")


def enter_namespaces() -> None:
    """New mount and pid namespaces; a user namespace first unless root."""
    if os.geteuid() == 0:
        _unshare(CLONE_NEWNS | CLONE_NEWPID)
        return
    uid, gid = os.geteuid(), os.getegid()
    _unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID)
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"),
                       ("gid_map", f"{gid} {gid} 1")):  # fmt: skip
        with open(f"/proc/self/{name}", "w") as f:
            f.write(text)


def _under(path: str, top: str) -> bool:
    return path == top or path.startswith(top + "/")


def mount_world(seen: list[str]) -> None:
    """In pid 1 of the new namespace: a fresh /proc, and fresh shared temporary directories."""
    contain._mount(None, "/", None, contain.MS_REC | contain.MS_PRIVATE)
    shared = [d for d in contain.SHARED_TEMP_DIRS if os.path.isdir(d)]
    carried = {  # held open before a fresh tmpfs hides them, bound back on top of it
        path: os.open(path, os.O_PATH | os.O_DIRECTORY)
        for path in seen
        if os.path.isdir(path) and any(_under(path, top) for top in shared)
    }
    contain._mount("proc", "/proc", "proc", contain.MS_NOSUID | contain.MS_NODEV)
    for directory in shared:
        contain._mount("tmp", directory, "tmpfs", contain.MS_NOSUID | contain.MS_NODEV,
                       "size=256m,mode=1777")  # fmt: skip
    for path, fd in carried.items():
        os.makedirs(path, mode=0o755, exist_ok=True)
        contain._mount(f"/proc/self/fd/{fd}", path, None, contain.MS_BIND | contain.MS_REC)
        os.close(fd)


def be_init(argv: list[str]) -> int:
    """Pid 1: run `argv`, reap every orphan, answer with `argv`'s exit status."""
    child = os.fork()
    if child == 0:
        os.execvp(argv[0], argv)  # noqa: S606
    while True:
        pid, status = os.wait()
        if pid == child:
            return _exit_code(status)


def _exit_code(status: int) -> int:
    code = os.waitstatus_to_exitcode(status)
    return code if code >= 0 else 128 - code  # killed by a signal: as a shell says it


def main(args: list[str]) -> int:
    split = args.index("--")
    seen = [os.path.realpath(path) for path in args[1:split:2]]  # --see PATH, ...
    argv = args[split + 1 :]
    try:
        enter_namespaces()
    except OSError as error:
        print(f"no private world here (not root, no user namespace): {error}", file=sys.stderr)
        return NO_WORLD
    init = os.fork()
    if init == 0:
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        try:
            mount_world(seen)
        except OSError as error:
            print(f"no private world here (mounts refused): {error}", file=sys.stderr)
            os._exit(NO_WORLD)
        os._exit(be_init(argv))
    _, status = os.waitpid(init, 0)
    return _exit_code(status)


def command(argv: list[str]) -> list[str]:
    """The command line that runs `argv` in a world of its own, seeing this checkout and
    this interpreter's installation wherever they live (a checkout under /tmp too)."""
    here = os.path.dirname(os.path.abspath(__file__))
    checkout = os.path.dirname(os.path.dirname(here))
    seen = {
        checkout,
        sys.prefix,
        sys.base_prefix,
        os.path.dirname(os.path.realpath(sys.executable)),
    }
    flags = [part for path in sorted(seen) for part in ("--see", path)]
    return [sys.executable, os.path.abspath(__file__), *flags, "--", *argv]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
