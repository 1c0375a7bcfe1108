"""Prepared runs: a run handed to the helper and isolated, its script waiting for `go`.

Every run is prepared first (a private directory with the tool's files, a uid of its own
where the server is root, seven pipes, the request sent to the helper, which forks the
supervisor; the supervisor isolates itself and starts the script, which waits for the
call's settings) and then started by `go`, its deadline. A cold call does both at once.

`Standbys` keeps one prepared run per recently called tool, made right after a call of that
tool, so that the next call of it pays for none of the preparing: no fork, uid change, mount
namespace or Landlock fence on its path, and for Node no interpreter start either -- Node
is exec'd at preparation and waits in its preload. A standby holds nothing of a call: the
arguments, settings and secrets, and the deadline, arrive only with `go`.

A standby is used only for an identical run (same language, code, files, bundle, limits,
interpreter: the key), and only where each run is fenced from every other -- a uid of its
own, or Landlock -- since a waiting process of one tool then sits beside the running script
of another. Standbys are discarded when there are more than `standby_runs` of them (oldest
first), when older than `standby_idle_s` (the supervisor also gives up by itself), and when
the Runner closes; a discarded standby never ran a line of its tool.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import select
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from kiln.runner.isolation import RunRecord, UidLease
from kiln.runner.launcher import close_quietly
from kiln.runner.pipes import status_fields

DRAIN_S = 5.0  # how long a discarded supervisor may take to kill its script and exit


@dataclass
class Prepared:
    """One prepared run: its record, and the server's ends of its pipes until they are used."""

    record: RunRecord
    lease: UidLease | None
    stdin: int  # write ends
    private: int
    go: int
    stdout: int  # read ends
    stderr: int
    status: int
    talk: int
    env: dict[str, str] = field(default_factory=dict)  # what the runner set in its environment
    key: str | None = None
    made: float = field(default_factory=time.monotonic)
    taken: bool = False  # the pipe ends belong to the run now (closed by whoever took them)
    # What was read from the status pipe before the call (`wait_ready`): its reader's start.
    status_head: bytes = b""

    @property
    def ready(self) -> bool:
        """Seen waiting for its call: the script has started and reached its wait (Node
        its preload, Python its compiled script)."""
        return "ready" in status_fields(self.status_head)

    @property
    def waiting(self) -> bool:
        """Not known to have ended (the supervisor reports an outcome when it does)."""
        return "outcome" not in status_fields(self.status_head)

    def wait_ready(self, patience_s: float) -> bool:
        """Wait (blocking, bounded) until the supervisor reports the script waiting for its
        call; False if it ended first (its status says why) or patience ran out. Only before
        the run is handed to anyone: the status pipe is read here."""
        give_up = time.monotonic() + patience_s
        poller = select.poll()
        poller.register(self.status, select.POLLIN)
        while not self.ready and self.waiting:
            left = give_up - time.monotonic()
            if left <= 0 or not poller.poll(left * 1000):
                return False
            chunk = os.read(self.status, 65536)
            if not chunk:
                return False
            self.status_head += chunk
        return self.ready

    def take(self) -> tuple[int, int, int, int, int, int, int]:
        """Hand the pipe ends over: from here the caller closes them."""
        self.taken = True
        return self.stdin, self.private, self.go, self.stdout, self.stderr, self.status, self.talk

    def let_go(self) -> None:
        """Not to be run: close `go` and wait (bounded) for the supervisor to kill it and exit;
        the record then says whether it reported. A no-op for a run that was started."""
        if self.taken:
            return
        self.taken = True
        close_quietly([self.go, self.stdin, self.private, self.stdout, self.stderr, self.talk])
        fields = status_fields(self.status_head + _drain(self.status, DRAIN_S))
        os.close(self.status)
        self.record.isolation = fields.get("isolation", "")
        self.record.reported = "outcome" in fields
        with contextlib.suppress(ValueError):
            self.record.supervisor = int(fields.get("pid", ""))


def _drain(fd: int, patience_s: float) -> bytes:
    """Everything written to `fd` until its writer closes it, or until patience runs out.

    poll, not select: a busy server's descriptors go past select's 1,024.
    """
    chunks = []
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    give_up = time.monotonic() + patience_s
    while (left := give_up - time.monotonic()) > 0 and poller.poll(left * 1000):
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


def standby_key(*parts: object) -> str:
    """What makes two runs interchangeable before they are called."""
    digest = hashlib.sha256()
    for part in parts:
        if isinstance(part, bytes):
            digest.update(hashlib.sha256(part).digest())
        else:
            digest.update(json.dumps(part, sort_keys=True, default=str).encode())
        digest.update(b"\0")
    return digest.hexdigest()


class Standbys:
    """At most `size` prepared runs by key, each used once; thread-safe."""

    def __init__(self, size: int, idle_s: float, finish: Callable[[Prepared], None]) -> None:
        self.size = size
        self.idle_s = idle_s
        self._finish = finish  # cleans up after a discarded standby (called outside the lock)
        self._ready: OrderedDict[str, Prepared] = OrderedDict()
        self._lock = threading.Lock()
        self._closed = False  # a standby made after `close` (a warm-up racing it) is dropped

    def take(self, key: str) -> Prepared | None:
        """The standby for `key`, if one is ready: the caller's from now on, to run or (when
        no longer `fresh`) to discard."""
        with self._lock:
            return self._ready.pop(key, None)

    def fresh(self, prepared: Prepared) -> bool:
        """True until the supervisor may have given up waiting for its call."""
        return time.monotonic() - prepared.made < self.idle_s * 0.9

    def has(self, key: str) -> bool:
        with self._lock:
            return key in self._ready

    def ensure_ready(self, key: str, patience_s: float) -> bool:
        """Whether a standby for `key` waits, once its script is seen waiting for the call
        (waited for, bounded, if it is still starting: meanwhile a call of it starts cold).
        One that went stale or ended is discarded: False, as when there is none."""
        prepared = self.take(key)
        if prepared is None:
            return False
        if self.fresh(prepared) and (prepared.wait_ready(patience_s) or prepared.waiting):
            self.put(prepared)
            return True
        self._finish(prepared)
        return False

    def put(self, prepared: Prepared) -> None:
        """Keep `prepared` for its key; discard what that pushes out or what has gone stale."""
        assert prepared.key is not None
        with self._lock:
            if self._closed:
                dropped = [prepared]
            elif prepared.key in self._ready:
                dropped = [self._ready.pop(prepared.key)]
            else:
                dropped = []
            if not self._closed:
                self._ready[prepared.key] = prepared
            stale = [k for k, p in self._ready.items() if not self.fresh(p)]
            dropped.extend(self._ready.pop(k) for k in stale)
            while len(self._ready) > self.size:
                dropped.append(self._ready.popitem(last=False)[1])
        for old in dropped:
            self._finish(old)

    def __len__(self) -> int:
        with self._lock:
            return len(self._ready)

    def close(self) -> None:
        """Discard every standby, and keep none made after (a warm-up racing the close)."""
        with self._lock:
            self._closed = True
        self.clear()

    def clear(self) -> None:
        """Discard every standby (blocking: each supervisor is waited for)."""
        with self._lock:
            dropped = list(self._ready.values())
            self._ready.clear()
        for prepared in dropped:
            self._finish(prepared)
