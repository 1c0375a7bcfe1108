"""Work that waits until the answer it follows has been sent.

After a call, the server that ran it has more to do than answer: the run's directory is
removed and the tool's next standby prepared (kiln.runner.runner), and on `kiln dev` the
call's ledger entry goes from its local file to the store (kiln.accounting.pending). Each is done
by a thread. A thread that starts while the answer is still being written competes with it
for the interpreter: the event loop gets the GIL back only when the thread lets go of it or
after the 5 ms switch interval, once per hand-back. Measured on `kiln dev` (strace, a trivial
tool called after 1 s idle): the answer left 4 ms after the ledger entry was on disk, while
the standby's preparation and the store write ran. With that work after the answer (and the
entry held on the loop when its answer is `alone`), the first call 1 s after a save went from
11.1 to 7.5 ms (`python -m bench.runner.trees`, bench/README).

So an answer is made inside `answering()` (for HTTP, `kiln.api.middleware.AfterAnswer`, the
apps' outermost middleware: this room knows no HTTP), and `later(work)` inside it keeps `work`
until the answer has been sent (or its request has failed), then calls it on the event loop,
in order. Outside a scope (a task's run, a stdio
session) or once the scope has ended, `work` is called soon: on the running event loop's
next turn, or at once in a thread that has none. `work` must be quick (it hands the real work
to a thread) and must not raise; what it raises is logged.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

log = logging.getLogger("kiln.runner.afterwards")

Work = Callable[[], object]


class _Scope:
    """What one request keeps for after its answer (threads of the request add to it)."""

    __slots__ = ("_lock", "_open", "_work")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open = True
        self._work: list[Work] = []

    def keep(self, work: Work) -> bool:
        with self._lock:
            if self._open:
                self._work.append(work)
            return self._open

    def __len__(self) -> int:
        with self._lock:
            return len(self._work)

    def end(self) -> list[Work]:
        with self._lock:
            self._open = False
            kept, self._work = self._work, []
        return kept


_SCOPE: ContextVar[_Scope | None] = ContextVar("kiln_after_answer", default=None)
_open = [0]  # answers being made now, in this process
_open_lock = threading.Lock()


def alone() -> bool:
    """Whether the answer being made is the only one (a short blocking step on the event
    loop then holds up no other request, and saves two thread hand-offs)."""
    return _open[0] <= 1


def later(work: Work) -> None:
    """Call `work` once this request's answer has been sent (soon, outside a request)."""
    scope = _SCOPE.get()
    if scope is not None and scope.keep(work):
        return
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # a thread with no event loop: nothing of ours to wait for
        _call(work)
        return
    loop.call_soon(_call, work)


def _call(work: Work) -> None:
    try:
        work()
    except Exception:
        log.exception("work kept for after an answer failed (%s)", work)


@contextmanager
def answering() -> Iterator[_Scope]:
    """The span of one answer: work kept with `later` inside it runs when it ends."""
    kept = _Scope()
    token = _SCOPE.set(kept)
    with _open_lock:
        _open[0] += 1
    try:
        yield kept
    finally:
        with _open_lock:
            _open[0] -= 1
        _SCOPE.reset(token)
        for work in kept.end():
            _call(work)
