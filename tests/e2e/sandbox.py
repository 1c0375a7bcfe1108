"""One Lambda execution environment, as far as a root test process can make one.

`python sandbox.py < CONFIG_JSON`, as root. It makes new mount, pid and network namespaces
and forks their first process (pid 1, the stand-in for Lambda's own init, which stays root),
which:

- mounts a fresh /proc, a `tmp_mb` tmpfs on /tmp (and small ones on /var/tmp, /dev/shm),
  makes `read_only` paths read-only (the function's code, its interpreter and packages,
  the system) and keeps the interpreter reachable for another uid (`contain.expose`);
- brings up its own loopback (an ioctl, as `ip link set lo up`) and serves `forwards` on
  it: 127.0.0.1:PORT inside is forwarded to HOST:PORT outside (the Runtime API on 9001,
  the store), each connection dialled from a thread that has joined the host's network
  namespace. Every byte that comes in through them is appended to `tap` (what the
  environment received);
- forks the runtime: every capability dropped, the uid `uid`, no_new_privs, and a seccomp
  filter that refuses what Lambda refuses: seccomp() and prctl(PR_SET_SECCOMP), landlock_*,
  unshare, setns, ptrace and clone with a namespace flag get EPERM (clone3 gets ENOSYS, so
  that libc falls back to clone, as under Docker's profile); then execs `argv` with `env`;
- reaps every orphan, and exits with the runtime: the kernel then kills everything left in
  the pid namespace. It dies with its parent (PR_SET_PDEATHSIG), so a killed sandbox
  leaves nothing.

Standard library and `kiln.runner.contain` only.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import json
import os
import signal
import socket
import struct
import sys
import threading
from typing import Any

from kiln.runner import contain

CLONE_NEWNS, CLONE_NEWPID, CLONE_NEWNET = 0x00020000, 0x20000000, 0x40000000
NAMESPACE_FLAGS = 0x7E020080  # NEWNS|NEWCGROUP|NEWUTS|NEWIPC|NEWUSER|NEWPID|NEWNET, NEWTIME
PR_CAPBSET_DROP = 24
MS_NOSUID, MS_NODEV = 2, 4
_libc = ctypes.CDLL(None, use_errno=True)

# Syscall numbers: (x86_64, aarch64).
ARCHES = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
SYSCALLS = {
    "seccomp": (317, 277),
    "landlock_create_ruleset": (444, 444),
    "landlock_add_rule": (445, 445),
    "landlock_restrict_self": (446, 446),
    "unshare": (272, 97),
    "setns": (308, 268),
    "ptrace": (101, 117),
    "clone3": (435, 435),
    "prctl": (157, 167),
    "clone": (56, 220),
}
RET_ALLOW, RET_ERRNO = 0x7FFF0000, 0x00050000
EPERM, ENOSYS = 1, 38
LD_ABS, JEQ, JSET, RET = 0x20, 0x15, 0x45, 0x06


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def lambda_filter() -> list[tuple[int, int, int, int]]:
    """The BPF program: (code, jt, jf, k) for each instruction."""
    machine = os.uname().machine
    index = 0 if machine == "x86_64" else 1
    nr = {name: numbers[index] for name, numbers in SYSCALLS.items()}
    eperm, enosys = RET_ERRNO | EPERM, RET_ERRNO | ENOSYS
    program = [(LD_ABS, 0, 0, 4), (JEQ, 1, 0, ARCHES[machine]), (RET, 0, 0, RET_ALLOW)]
    program.append((LD_ABS, 0, 0, 0))  # the syscall number
    for name in ("seccomp", "landlock_create_ruleset", "landlock_add_rule",
                 "landlock_restrict_self", "unshare", "setns", "ptrace"):  # fmt: skip
        program += [(JEQ, 0, 1, nr[name]), (RET, 0, 0, eperm)]
    program += [(JEQ, 0, 1, nr["clone3"]), (RET, 0, 0, enosys)]
    # prctl(PR_SET_SECCOMP, ...): its first argument (low 32 bits at offset 16)
    program += [(JEQ, 0, 4, nr["prctl"]), (LD_ABS, 0, 0, 16), (JEQ, 0, 1, 22),
                (RET, 0, 0, eperm), (RET, 0, 0, RET_ALLOW)]  # fmt: skip
    program += [(JEQ, 0, 4, nr["clone"]), (LD_ABS, 0, 0, 16), (JSET, 0, 1, NAMESPACE_FLAGS),
                (RET, 0, 0, eperm), (RET, 0, 0, RET_ALLOW)]  # fmt: skip
    program.append((RET, 0, 0, RET_ALLOW))
    return program


def install_filter() -> None:
    program = lambda_filter()
    filters = (contain._SockFilter * len(program))(*(contain._SockFilter(*i) for i in program))
    fprog = contain._SockFprog(len(program), filters)
    contain.prctl(contain.PR_SET_NO_NEW_PRIVS, 1)
    _check(
        _libc.prctl(contain.PR_SET_SECCOMP, contain.SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0),
        "installing the Lambda profile's filter",
    )


def drop_to(uid: int) -> None:
    """Every capability gone (bounding set too), one unprivileged uid and gid."""
    for cap in range(64):
        if _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            break
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)  # clears the permitted and effective sets


SCRATCH = ("/tmp", "/var/tmp", "/dev/shm")  # each gets a fresh tmpfs, as in Lambda


def _under_scratch(path: str) -> bool:
    return any(path == top or path.startswith(top + "/") for top in SCRATCH)


def mount_views(config: dict[str, Any]) -> None:
    contain._mount(None, "/", None, contain.MS_REC | contain.MS_PRIVATE)
    # The code and packages may live under /tmp (a checkout there): held open before the
    # fresh /tmp hides them, and bound back at their paths on top of it.
    carried = {
        path: os.open(path, os.O_PATH | os.O_DIRECTORY)
        for path in config["read_only"]
        if _under_scratch(path) and os.path.isdir(path)
    }
    contain._mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV)
    contain._mount("tmp", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV,
                   f"size={config['tmp_mb']}m,mode=1777")  # fmt: skip
    for small in SCRATCH[1:]:
        if os.path.isdir(small):
            contain._mount("tmp", small, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=1777")
    for path, fd in carried.items():
        os.makedirs(path, mode=0o755, exist_ok=True)
        contain._mount(f"/proc/self/fd/{fd}", path, None, contain.MS_BIND | contain.MS_REC)
        os.close(fd)
    contain.expose(config["reachable"], [])
    for path in config["read_only"]:
        if os.path.exists(path):
            contain._mount(path, path, None, contain.MS_BIND | contain.MS_REC)
            contain._mount(None, path, None, contain.MS_BIND | contain.MS_REMOUNT
                           | contain.MS_RDONLY)  # fmt: skip


class Forwarder:
    def __init__(self, host_net: int, tap: Any) -> None:
        self.host_net = host_net
        self.tap = tap
        self.lock = threading.Lock()

    def serve(self, listener: socket.socket, target: tuple[str, int]) -> None:
        while True:
            inside, _ = listener.accept()
            threading.Thread(target=self.connect, args=(inside, target), daemon=True).start()

    def connect(self, inside: socket.socket, target: tuple[str, int]) -> None:
        _check(_libc.setns(self.host_net, CLONE_NEWNET), "setns")  # this thread only
        try:
            outside = socket.create_connection(target)
        except OSError:
            inside.close()
            return
        # A forwarder sends each piece as it comes: Nagle's algorithm would hold a small second
        # write (a response's body after its headers) for the peer's delayed ACK, ~40 ms a hop
        # that Lambda's own Runtime API does not add (bench/runner/new_tenant.py's warm runs).
        for sock in (inside, outside):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=self.pump, args=(inside, outside, False), daemon=True).start()
        self.pump(outside, inside, True)

    def pump(self, source: socket.socket, sink: socket.socket, inbound: bool) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                if inbound and self.tap is not None:
                    with self.lock:
                        self.tap.write(data)
                sink.sendall(data)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)


def loopback_up() -> None:
    """`ip link set lo up`, without needing iproute2: SIOCGIFFLAGS, then SIOCSIFFLAGS."""
    siocgifflags, siocsifflags, iff_up = 0x8913, 0x8914, 0x1
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = bytearray(struct.pack("16sH14x", b"lo", 0))
        fcntl.ioctl(sock, siocgifflags, request)
        flags = struct.unpack_from("H", request, 16)[0] | iff_up
        struct.pack_into("H", request, 16, flags)
        fcntl.ioctl(sock, siocsifflags, request)


def init(config: dict[str, Any], host_net: int, tap: Any) -> None:
    contain.prctl(contain.PR_SET_PDEATHSIG, signal.SIGKILL)
    mount_views(config)
    loopback_up()
    listeners = []
    for inside, host, port in config["forwards"]:
        listener = socket.create_server(("127.0.0.1", inside))
        listeners.append((listener, (host, port)))
    ready_r, ready_w = os.pipe()
    runtime = os.fork()
    if runtime == 0:
        for listener, _ in listeners:
            listener.close()
        os.close(ready_w)
        os.close(host_net)
        if tap is not None:
            tap.close()
        os.read(ready_r, 1)
        drop_to(config["uid"])
        install_filter()
        os.chdir(config["cwd"])
        os.execve(config["argv"][0], config["argv"], config["env"])  # noqa: S606
    forwarder = Forwarder(host_net, tap)
    for listener, target in listeners:
        threading.Thread(target=forwarder.serve, args=(listener, target), daemon=True).start()
    os.write(ready_w, b"g")
    while True:
        pid, status = os.waitpid(-1, 0)
        if pid == runtime:
            os._exit(os.waitstatus_to_exitcode(status) & 0xFF)


def main() -> None:
    config = json.loads(sys.stdin.read())
    host_net = os.open("/proc/self/ns/net", os.O_RDONLY)
    # Opened before the environment's own /tmp hides it.
    tap = open(config["tap"], "ab", buffering=0) if config.get("tap") else None  # noqa: SIM115
    _check(_libc.unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET), "unshare")
    first = os.fork()
    if first == 0:
        try:
            init(config, host_net, tap)
        except BaseException as error:
            print(f"sandbox: {type(error).__name__}: {error}", file=sys.stderr, flush=True)
            os._exit(70)
    _, status = os.waitpid(first, 0)
    sys.exit(os.waitstatus_to_exitcode(status))


if __name__ == "__main__":
    main()
