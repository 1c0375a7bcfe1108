"""Containment primitives: what keeps one run from another, and from the server.

Standard library only: the helper process runs with `python -I -S` and loads this file by
path (see `supervisor.py`); the server imports it as `kiln.runner.contain`.

- A run's processes carry a mark they cannot remove: `no_new_privs` and an allow-everything
  seccomp filter, both inherited across fork and exec and irrevocable. /proc shows the filter
  count, so the server can tell a tool's orphan from its own children (`is_marked`).
- As root, each run has its own uid: `kill_uid` kills all of it at once (kill(-1) sent as that
  uid reaches exactly its processes), `private_mounts` gives it a size-limited tmpfs for its
  work directory and for /tmp, /var/tmp, /dev/shm, in a mount namespace of its own that
  vanishes with its last process.
- Files a run left in the shared temporary directories are found by owner (its own uid) or,
  when every run shares the server's uid, by being new since the run started (`new_entries`).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import stat
from collections.abc import Collection, Iterable, Sequence

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_SECCOMP = 22
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38
SECCOMP_MODE_FILTER = 2
SECCOMP_SET_MODE_FILTER = 1
SECCOMP_FILTER_FLAG_SPEC_ALLOW = 4
SYS_SECCOMP = {"x86_64": 317, "aarch64": 277}  # Lambda's two architectures
SECCOMP_RET_ALLOW = 0x7FFF0000
BPF_RET_K = 0x06
CLONE_NEWNS = 0x00020000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT = 1, 2, 4, 32
MS_BIND, MS_REC, MS_PRIVATE = 4096, 16384, 1 << 18
# The world-writable places a run could leave files in; as root they are replaced by the
# run's own tmpfs, otherwise they are swept after the run.
SHARED_TEMP_DIRS = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")  # noqa: S108

_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def prctl(option: int, arg: int) -> None:
    _check(_libc.prctl(option, arg, 0, 0, 0), f"prctl({option})")


class _SockFilter(ctypes.Structure):
    _fields_ = (
        ("code", ctypes.c_ushort),
        ("jt", ctypes.c_ubyte),
        ("jf", ctypes.c_ubyte),
        ("k", ctypes.c_uint),
    )


class _SockFprog(ctypes.Structure):
    _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter)))


# The mark's filter also refuses what reaches past every fence: a unix socket of the run's
# own making (Landlock scopes only abstract ones; a named socket of the server's uid, a world-
# writable one in /run, a docker.sock are reachable by path, and a mount namespace hides only
# what it replaces) and io_uring, whose socket and connect operations no seccomp filter sees.
# `socketpair` stays allowed (asyncio needs it), and so does every other socket family.
AF_UNIX = 1
EACCES, ENOSYS = 13, 38
SECCOMP_RET_ERRNO = 0x00050000
BPF_LD_W_ABS, BPF_JEQ_K = 0x20, 0x15
IO_URING_SETUP = 425  # the same number on every architecture
# machine: (audit arch, socket), (its 32-bit compat calls: socket, socketcall or none);
# a call of any arch but the native one is checked against the compat numbers.
_SOCKET_CALLS = {
    "x86_64": ((0xC000003E, 41), (359, 102)),
    "aarch64": ((0xC00000B7, 198), (281, 0xFFFFFFFF)),
}
X32_BIT = 0x40000000  # x86_64's x32 calls: the same arch, numbers with this bit set


_Step = str | tuple[int, str | int, str | int, int]  # a label, or (code, jt, jf, k)


def run_filter(allow_unix_sockets: bool) -> list[tuple[int, int, int, int]]:
    """The run mark's BPF program, as (code, jt, jf, k): allow all, or refuse unix sockets."""
    numbers = _SOCKET_CALLS.get(os.uname().machine)
    if allow_unix_sockets or numbers is None:
        return [(BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW)]
    (arch, sock), (compat_sock, socketcall) = numbers
    # Offsets into seccomp_data: nr 0, arch 4, args[0] 16 (its low half: the domain).
    program: list[_Step] = [
        (BPF_LD_W_ABS, 0, 0, 4),
        (BPF_JEQ_K, 0, "compat", arch),
        (BPF_LD_W_ABS, 0, 0, 0),
        (BPF_JEQ_K, "nosys", 0, IO_URING_SETUP),
        (BPF_JEQ_K, "domain", 0, sock),
        (BPF_JEQ_K, "domain", 0, sock | X32_BIT),
        (BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW),
        "compat",
        (BPF_LD_W_ABS, 0, 0, 0),
        (BPF_JEQ_K, "nosys", 0, IO_URING_SETUP),
        (BPF_JEQ_K, "refuse", 0, socketcall),  # its argument is a pointer: all of it
        (BPF_JEQ_K, "domain", 0, compat_sock),
        (BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW),
        "domain",
        (BPF_LD_W_ABS, 0, 0, 16),
        (BPF_JEQ_K, "refuse", 0, AF_UNIX),
        (BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW),
        "refuse",
        (BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | EACCES),  # PermissionError, like the fences
        "nosys",
        (BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | ENOSYS),  # libuv and others fall back
    ]
    return _assemble(program)


def _assemble(program: list[_Step]) -> list[tuple[int, int, int, int]]:
    """Resolves labels (strings) to BPF's forward jumps (instructions skipped after this one)."""
    labels, pc = {}, 0
    for item in program:
        if isinstance(item, str):
            labels[item] = pc
        else:
            pc += 1
    out: list[tuple[int, int, int, int]] = []
    for item in program:
        if not isinstance(item, str):
            code, jt, jf, k = item
            here = len(out) + 1
            out.append((code, labels[jt] - here if isinstance(jt, str) else jt,
                        labels[jf] - here if isinstance(jf, str) else jf, k))  # fmt: skip
    return out


def mark_as_run(allow_unix_sockets: bool = False) -> None:
    """Mark this process and all it will start as a tool's: irremovable, inherited by all.

    Also `no_new_privs`: no setuid program can give a tool more rights than it has; and,
    unless allowed (`KILN_RUN_UNIX_SOCKETS`), no unix socket of its own (see `run_filter`).
    """
    prctl(PR_SET_NO_NEW_PRIVS, 1)
    steps = run_filter(allow_unix_sockets)
    program = (_SockFilter * len(steps))(*(_SockFilter(c, jt, jf, k) for c, jt, jf, k in steps))
    fprog = _SockFprog(len(steps), program)
    number = SYS_SECCOMP.get(os.uname().machine)
    # SPEC_ALLOW: where the kernel would otherwise turn on its speculative-store-bypass
    # mitigation for every seccomp'd process (slowing JIT-heavy Node), leave it as it was.
    if number is not None and (
        _libc.syscall(number, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_SPEC_ALLOW,
                      ctypes.byref(fprog)) == 0
    ):  # fmt: skip
        return
    _check(
        _libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0),
        "installing the run's seccomp mark",
    )


# CAP_CHOWN, CAP_KILL, CAP_SETGID, CAP_SETUID: what giving each run its own uid takes.
UID_SWITCH_CAPABILITIES = (0, 5, 6, 7)


def can_switch_uid() -> bool:
    """True when this process may run scripts as other uids (root with its capabilities).

    Root without capabilities (a container started with them dropped) is no better placed
    than Lambda's one unprivileged uid, and is treated the same way.
    """
    if os.geteuid() != 0:
        return False
    try:
        with open("/proc/self/status", "rb") as f:
            effective = next(int(line.split()[1], 16) for line in f if line.startswith(b"CapEff:"))
    except (OSError, StopIteration, ValueError):
        return False
    return all(effective >> bit & 1 for bit in UID_SWITCH_CAPABILITIES)


def seccomp_filters(pid: int | str) -> int | None:
    """How many seccomp filters a process carries; None when it is gone or /proc cannot say."""
    mode = None
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"Seccomp_filters:"):
                    return int(line.split()[1])
                if line.startswith(b"Seccomp:"):
                    mode = int(line.split()[1])
    except (OSError, ValueError):
        return None
    # Before Linux 5.9 only the mode shows: filtered (2) or not, which still tells a marked
    # process from a server that has no filter of its own.
    return None if mode is None else int(mode == SECCOMP_MODE_FILTER)


def is_marked(pid: int | str, own_filters: int | None) -> bool:
    """True when `pid` carries more seccomp filters than the server: a tool's process."""
    if own_filters is None:
        return False
    count = seccomp_filters(pid)
    return count is not None and count > own_filters


def kill_uid(uid: int) -> None:
    """SIGKILL every process whose real or saved uid is `uid`, at once.

    kill(-1) reaches every process the sender may signal, which for a sender whose real and
    effective uid are `uid` is exactly the processes of `uid`; the kernel walks them under
    the lock fork takes, so no fork escapes it, and a process with SIGKILL pending never runs
    another instruction. (Its return value says nothing: it counts processes it may not
    signal too.) Root and single-threaded callers only (the supervisor): the uid change is
    per thread in the kernel.
    """
    os.setresuid(uid, uid, 0)
    try:
        os.kill(-1, signal.SIGKILL)
    except ProcessLookupError:
        pass
    finally:
        os.setresuid(0, 0, 0)


# --- files left in shared places ---------------------------------------------------------


MAX_SENT_ENTRIES = 2000  # of a snapshot, in a run's request to the helper


def snapshot(dirs: Iterable[str] = SHARED_TEMP_DIRS) -> set[tuple[str, int]]:
    """(path, inode) of every entry directly in `dirs`: what existed before a run."""
    seen: set[tuple[str, int]] = set()
    for directory in dirs:
        with contextlib.suppress(OSError), os.scandir(directory) as entries:
            for entry in entries:
                with contextlib.suppress(OSError):
                    seen.add((entry.path, entry.inode()))
    return seen


def sendable(before: set[tuple[str, int]] | None) -> list[tuple[str, int]] | None:
    """A `snapshot` to send to the helper in a run's request, or None: none was taken, or it
    holds too much to send (MAX_SENT_ENTRIES; the helper then takes its own)."""
    if before is None or len(before) > MAX_SENT_ENTRIES:
        return None
    return sorted(before)


def new_entries(
    before: set[tuple[str, int]],
    uid: int,
    dirs: Iterable[str] = SHARED_TEMP_DIRS,
    keep: Collection[str] = (),
) -> list[str]:
    """Entries of `dirs` owned by `uid` that were not there in `before`, but those in `keep`.

    `keep` names the server's own places (its bundle cache, its runs' directories), which
    it may create while a run is under way.
    """
    return [
        path
        for path, inode in snapshot(dirs) - before
        if path not in keep and _owner(path) == uid and (path, inode) not in before
    ]


def owned_entries(uid: int, dirs: Iterable[str] = SHARED_TEMP_DIRS) -> list[str]:
    """Everything `uid` owns in `dirs`, looking inside world-writable directories it does not."""
    found: list[str] = []
    pending = [d for d in dirs if os.path.isdir(d)]
    while pending:
        with contextlib.suppress(OSError), os.scandir(pending.pop()) as entries:
            for entry in entries:
                try:
                    info = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if info.st_uid == uid:
                    found.append(entry.path)
                elif stat.S_ISDIR(info.st_mode) and info.st_mode & stat.S_IWOTH:
                    pending.append(entry.path)
    return found


def _owner(path: str) -> int | None:
    try:
        return os.lstat(path).st_uid
    except OSError:
        return None


def disk_usage(paths: Iterable[str]) -> int:
    """Bytes of disk the files under `paths` take (symbolic links are not followed)."""
    total = 0
    for top in paths:
        with contextlib.suppress(OSError):
            info = os.lstat(top)
            total += info.st_blocks * 512
            if not stat.S_ISDIR(info.st_mode):
                continue
        for root, dirs, files in os.walk(top):
            for name in (*dirs, *files):
                with contextlib.suppress(OSError):
                    total += os.lstat(os.path.join(root, name)).st_blocks * 512
    return total


def remove(paths: Iterable[str]) -> int:
    """Remove files and directory trees; returns how many of `paths` were removed."""
    removed = 0
    for path in paths:
        try:
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.unlink(path)
        except FileNotFoundError:
            continue
        except OSError:
            shutil.rmtree(path, ignore_errors=True)
        removed += 1
    return removed


# --- a private view of the file system (root only) ----------------------------------------


class MountsUnavailableError(OSError):
    """This process may not make a mount namespace (no CAP_SYS_ADMIN, as in most containers)."""


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str = "") -> None:
    _check(
        _libc.mount(
            source.encode() if source else None,
            target.encode(),
            fstype.encode() if fstype else None,
            flags,
            data.encode() if data else None,
        ),
        f"mount on {target}",
    )


def _bind(fd: int, target: str, *, read_only: bool) -> None:
    _mount(f"/proc/self/fd/{fd}", target, None, MS_BIND | MS_REC)
    if read_only:
        _mount(None, target, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)


def blocker(path: str) -> str | None:
    """The topmost directory above `path` that others may not enter, if any."""
    current = "/"
    for part in path.strip("/").split("/")[:-1]:
        current = os.path.join(current, part)
        try:
            if not os.stat(current).st_mode & stat.S_IXOTH:
                return current
        except OSError:
            return None
    return None


def _under(path: str, tops: Iterable[str]) -> bool:
    return any(path == top or path.startswith(top.rstrip("/") + "/") for top in tops)


def private_namespace() -> None:
    """Move this process into a mount namespace of its own that propagates nothing back.

    Raises MountsUnavailableError when that is not permitted (no CAP_SYS_ADMIN).
    """
    try:
        _check(_libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
        _mount(None, "/", None, MS_REC | MS_PRIVATE)
    except OSError as error:
        raise MountsUnavailableError(error.errno, str(error)) from None


def expose(read_only: Sequence[str], read_write: Sequence[str], shared: Sequence[str] = ()) -> None:
    """Keep these paths reachable by any uid in this (private) namespace, as they are.

    A path under a directory others may not enter (a 0700 /root holding the interpreter)
    gets that directory masked by an empty tmpfs and itself bound back in; a path under a
    replaced `shared` directory is bound back into the replacement.
    """
    # Opened in this namespace: a bind mount's source must be one of its own mounts.
    keep = {p: os.open(p, os.O_PATH) for p in (*read_only, *read_write) if os.path.exists(p)}
    try:
        outside = [p for p in keep if not _under(p, shared)]
        for closed in sorted({b for p in outside if (b := blocker(p)) is not None}):
            _mount("kiln-mask", closed, "tmpfs", MS_NOSUID | MS_NODEV, "size=64k,mode=0755")
        for path, fd in keep.items():
            with contextlib.suppress(OSError):
                if os.path.samestat(os.stat(path), os.fstat(fd)) and blocker(path) is None:
                    continue  # reachable as it is
            if stat.S_ISDIR(os.fstat(fd).st_mode):
                os.makedirs(path, 0o755, exist_ok=True)
            else:  # a single file (a binary): its directory may hold what the run must not see
                os.makedirs(os.path.dirname(path), 0o755, exist_ok=True)
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o644))
            _bind(fd, path, read_only=path not in read_write)
    finally:
        # A forked script inherits descriptors: one to a directory as it was before the
        # masks would let it climb out of them (openat(fd, "..")).
        for fd in keep.values():
            os.close(fd)


def private_mounts(
    run_dir: str,
    quota_bytes: int,
    uid: int,
    read_only: Sequence[str],
    read_write: Sequence[str],
    shared: Sequence[str] = SHARED_TEMP_DIRS,
) -> None:
    """Give this process (and all it starts) a file system view of its own.

    One tmpfs of `quota_bytes` holds the run's work directory (at `run_dir`, owned by `uid`)
    and its temporary directory, which replaces every directory in `shared`. Paths the run
    needs (`read_only`: the interpreter's installation or a binary, the bundle;
    `read_write`: directories the operator shares with runs) stay reachable (see `expose`).
    Nothing here is visible outside the namespace, and the tmpfs is freed when its last
    process exits. Raises MountsUnavailableError when mounting is not permitted, before
    changing anything: the caller then watches disk use instead.
    """
    private_namespace()
    shared = [d for d in shared if os.path.isdir(d) and not os.path.islink(d)]
    _mount("kiln-run", run_dir, "tmpfs", MS_NOSUID | MS_NODEV, f"size={quota_bytes},mode=0755")
    temp_dir, work_dir = os.path.join(run_dir, "temp"), os.path.join(run_dir, "work")
    os.mkdir(temp_dir)
    os.chmod(temp_dir, 0o1777)  # noqa: S103 - the run's own /tmp, sticky like any /tmp
    os.mkdir(work_dir, 0o700)
    os.chown(work_dir, uid, uid)
    temp, work = os.open(temp_dir, os.O_PATH), os.open(work_dir, os.O_PATH)
    try:
        # Bound back in before /tmp is replaced: their descriptors must be opened first.
        expose_later = [p for p in (*read_only, *read_write) if _under(p, shared)]
        before = {p: os.open(p, os.O_PATH) for p in expose_later if os.path.exists(p)}
        for directory in shared:
            _bind(temp, directory, read_only=False)
        _rebind(before, read_write)
        expose(
            [p for p in read_only if p not in before], [p for p in read_write if p not in before]
        )
        os.makedirs(run_dir, 0o755, exist_ok=True)  # under a replaced /tmp it is gone: recreate
        _bind(work, run_dir, read_only=False)
    finally:
        for fd in (temp, work):
            os.close(fd)


def _rebind(fds: dict[str, int], read_write: Sequence[str]) -> None:
    """Bind paths that a replaced directory hid back in, from descriptors opened before."""
    try:
        for path, fd in fds.items():
            if stat.S_ISDIR(os.fstat(fd).st_mode):
                os.makedirs(path, 0o755, exist_ok=True)
            else:
                os.makedirs(os.path.dirname(path), 0o755, exist_ok=True)
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o644))
            _bind(fd, path, read_only=path not in read_write)
    finally:
        for fd in fds.values():
            os.close(fd)
