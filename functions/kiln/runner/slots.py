"""Run slots, shared fairly: no tool, caller or view holds them all.

A run names its shares (`RunRequest.shares`: its tool, its caller, its view). At most
`slots` runs hold a slot at once, and no share more than `slots - 1` of them, so whatever
one tool, one key or one view does -- a burst, runs that hang, a tool that calls itself
through Kiln -- a slot is left for everyone else. A run over its share waits, and runs of
others pass it as slots free up. A run that comes from inside another run (a tool calling
Kiln's own endpoint, `RunRequest.from_run`) is never made to wait: waiting behind its own
caller's runs could never end, so it is refused at once (`RunSlotRefusedError`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator, Callable, Sequence

from kiln.runner.errors import RunnerBusyError, RunSlotRefusedError


class SlotGate:
    """At most `slots` runs at once, `share` per share, `queue` callers waiting."""

    def __init__(self, slots: int, queue: int) -> None:
        self.slots = slots
        self.queue = queue
        self.share = max(1, slots - 1)
        self.running = 0
        self.waiting = 0
        self._held: Counter[str] = Counter()
        self._waiters: list[tuple[Sequence[str], asyncio.Future[None]]] = []

    def _full_share(self, shares: Sequence[str]) -> str | None:
        return next((s for s in shares if self._held[s] >= self.share), None)

    def _fits(self, shares: Sequence[str]) -> bool:
        return self.running < self.slots and self._full_share(shares) is None

    @contextlib.asynccontextmanager
    async def slot(
        self, shares: Sequence[str] = (), from_run: Callable[[], bool] | None = None
    ) -> AsyncIterator[None]:
        if self._fits(shares):
            self._take(shares)
        else:
            if from_run is not None and from_run():
                raise RunSlotRefusedError(self.running, self.slots, self._full_share(shares))
            if self.waiting >= self.queue:
                raise RunnerBusyError(self.running, self.waiting)
            await self._wait(shares)
        try:
            yield
        finally:
            self._release(shares)

    async def _wait(self, shares: Sequence[str]) -> None:
        entry = (shares, asyncio.get_running_loop().create_future())
        self._waiters.append(entry)
        self.waiting += 1
        try:
            await entry[1]
        except BaseException:
            if entry in self._waiters:
                self._waiters.remove(entry)
            elif entry[1].done() and not entry[1].cancelled():
                self._release(shares)  # given a slot, then cancelled: give it on
            raise
        finally:
            self.waiting -= 1

    def _take(self, shares: Sequence[str]) -> None:
        self.running += 1
        self._held.update(shares)

    def _release(self, shares: Sequence[str]) -> None:
        self.running -= 1
        self._held.subtract(shares)
        for share in shares:
            if self._held[share] <= 0:
                del self._held[share]
        for entry in list(self._waiters):  # in order of arrival: the first that fits goes
            waiting_shares, future = entry
            if future.done():
                self._waiters.remove(entry)
            elif self._fits(waiting_shares):
                self._waiters.remove(entry)
                self._take(waiting_shares)
                future.set_result(None)
