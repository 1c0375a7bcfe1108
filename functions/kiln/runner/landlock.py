"""A file system, network and signal fence for runs that share the server's uid (Landlock).

Without root there is no second uid and no mount namespace: a tool runs as the server's
user and could read whatever that user can (the `kiln dev` state directory with the
emulator's key, the server's home, the bundle cache). Landlock lets an unprivileged process
give up rights for itself and everything it starts, irrevocably: the script's process
enters a ruleset right after fork, with `no_new_privs`, before it runs a line.

What the ruleset allows (everything else is refused with EACCES):

- read and execute: the system (`/usr`, `/lib*`, `/bin`, `/sbin`, `/etc`, `/proc`, `/sys`),
  the interpreter's installation, the bundle, the preload (`read_only`);
- read and write device files in `/dev` (`/dev/null`, `/dev/urandom`, a tty), not make them;
- everything in its own run directory and in the directories the operator shares with
  runs (`read_write`); nothing else, not even `/tmp` (`TMPDIR` is the run directory);
- TCP connect only to `tcp_ports` when given (ABI 4): `kiln dev` leaves its emulator's
  port out, so a tool cannot even reach it;
- no signal to, and no abstract unix socket of, any process outside the run (ABI 6); and,
  as with any Landlock domain, no ptrace of them (so no `/proc/PID/mem` or `environ`).

Standard library only (ctypes): the helper loads this file by path (see `supervisor.py`).
The kernel's ABI version says what it can enforce; `fence` reports it, never more.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import stat
from collections.abc import Iterable, Sequence

# The same numbers on every architecture (added after the syscall tables were unified).
SYS_CREATE_RULESET, SYS_ADD_RULE, SYS_RESTRICT_SELF = 444, 445, 446
CREATE_RULESET_VERSION = 1
RULE_PATH_BENEATH, RULE_NET_PORT = 1, 2
PR_SET_NO_NEW_PRIVS = 38

EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
REFER, TRUNCATE = 1 << 13, 1 << 14  # ABI 2, ABI 3
ALL_ABI1 = (1 << 13) - 1  # execute ... make_sym
FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE  # what a rule on a file may grant
READ = EXECUTE | READ_FILE | READ_DIR
DEVICES = READ_FILE | WRITE_FILE | READ_DIR | TRUNCATE  # open /dev/null for writing, no mknod
CONNECT_TCP = 1 << 1  # ABI 4
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1  # ABI 6

# What any program needs to start and run: libraries, configuration, certificates, /proc.
SYSTEM_READ = ("/usr", "/lib", "/lib64", "/lib32", "/libx32", "/bin", "/sbin", "/etc",
               "/proc", "/sys")  # fmt: skip
SYSTEM_FILES = ("/etc/resolv.conf", "/etc/hosts", "/etc/localtime")  # their real paths too

_libc = ctypes.CDLL(None, use_errno=True)


class _RulesetAttr(ctypes.Structure):
    _fields_ = (
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    )


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = (("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32))


class _NetPortAttr(ctypes.Structure):
    _fields_ = (("allowed_access", ctypes.c_uint64), ("port", ctypes.c_uint64))


def _fail(what: str) -> OSError:
    errno = ctypes.get_errno()
    return OSError(errno, f"landlock {what}: {os.strerror(errno)}")


def abi() -> int:
    """The Landlock ABI version of this kernel; 0 when it has none or it is turned off."""
    version = _libc.syscall(SYS_CREATE_RULESET, None, ctypes.c_size_t(0),
                            ctypes.c_uint32(CREATE_RULESET_VERSION))  # fmt: skip
    return max(0, int(version))


def handled_fs(version: int) -> int:
    """Every file system right this ABI can refuse (device ioctls excepted: left to DAC)."""
    rights = ALL_ABI1
    if version >= 2:
        rights |= REFER
    if version >= 3:
        rights |= TRUNCATE
    return rights


def system_paths() -> list[str]:
    """SYSTEM_READ, plus where the few /etc files a resolver reads really live."""
    paths = list(SYSTEM_READ)
    for name in SYSTEM_FILES:
        real = os.path.realpath(name)
        if real != name:
            paths.append(real)
    return paths


class Ruleset:
    """A ruleset under construction; `fd` is what the script's process enters."""

    def __init__(self, version: int, *, files: bool, tcp_ports: Sequence[int] | None) -> None:
        self.version = version
        self.fs = handled_fs(version) if files else 0
        self.net = CONNECT_TCP if tcp_ports is not None and version >= 4 else 0
        scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if version >= 6 else 0
        attr = _RulesetAttr(self.fs, self.net, scoped)
        fd = _libc.syscall(SYS_CREATE_RULESET, ctypes.byref(attr),
                           ctypes.c_size_t(ctypes.sizeof(attr)), ctypes.c_uint32(0))  # fmt: skip
        if fd < 0:
            raise _fail("create_ruleset")
        self.fd = int(fd)
        try:
            rule = _NetPortAttr(CONNECT_TCP, 0)  # one struct for all: a thousand rules per run
            for port in tcp_ports if self.net and tcp_ports else ():
                rule.port = port
                self._add(RULE_NET_PORT, rule)
        except BaseException:
            os.close(self.fd)
            raise

    def allow(self, paths: Iterable[str], rights: int) -> None:
        """Allow `rights` beneath each path that exists (a file gets only file rights)."""
        for path in paths:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue  # absent on this system (/lib32), or closed to us: nothing to allow
            try:
                mode = os.fstat(fd).st_mode
                allowed = rights & self.fs
                if not stat.S_ISDIR(mode):
                    allowed &= FILE_RIGHTS
                if allowed:
                    self._add(RULE_PATH_BENEATH, _PathBeneathAttr(allowed, fd))
            finally:
                os.close(fd)

    def _add(self, rule_type: int, attr: ctypes.Structure) -> None:
        if _libc.syscall(SYS_ADD_RULE, self.fd, rule_type, ctypes.byref(attr), 0) != 0:
            raise _fail("add_rule")

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)


def fence(
    read_only: Sequence[str],
    read_write: Sequence[str],
    tcp_ports: Sequence[int] | None,
    *,
    files: bool,
) -> tuple[int, str] | None:
    """Build the ruleset a run will enter: (its descriptor, what it enforces), or None.

    `files` False leaves the file system to other means (a uid and mount namespace of the
    run's own) and fences only the network and signals. None when this kernel has no
    Landlock, or nothing the caller asked for is enforceable here.
    """
    version = abi()
    if version == 0 or (not files and version < 4 and tcp_ports is not None):
        return None
    if not files and tcp_ports is None and version < 6:
        return None
    ruleset = Ruleset(version, files=files, tcp_ports=tcp_ports)
    try:
        if files:
            ruleset.allow([*system_paths(), *read_only], READ)
            ruleset.allow(["/dev"], DEVICES)
            ruleset.allow(read_write, ruleset.fs)
    except BaseException:
        ruleset.close()
        raise
    enforced = ["files"] if files else []
    if ruleset.net:
        enforced.append("tcp")
    if version >= 6:
        enforced.append("signals")
    return ruleset.fd, f"landlock/{version}:{'+'.join(enforced)}"


def enter(fd: int) -> None:
    """In the script's process: enter the ruleset for good (this process and all it starts)."""
    _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)  # required; also set by the run's mark
    try:
        if _libc.syscall(SYS_RESTRICT_SELF, fd, ctypes.c_uint32(0)) != 0:
            raise _fail("restrict_self")
    finally:
        os.close(fd)
