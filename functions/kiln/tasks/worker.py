"""Runs one stored task: the tool through the unchanged runner, a lease kept alive meanwhile.

The worker renews the task's lease every `heartbeat_s`. The renewal is conditional on the
task still being `working`, so a failed renewal means someone cancelled it: the run is
cancelled, which makes the runner kill its whole process tree before `execute` returns. A
worker that dies stops renewing; the next reader sees the lease run out and fails the task
(`TaskService.get_task`), so no task stays `working` forever.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from kiln.catalog.model import Tool
from kiln.protocol.backend import ToolOutcome, ToolView
from kiln.protocol.calling import RunFailedError, ToolCaller
from kiln.protocol.errors import error_object
from kiln.tasks.settings import TaskSettings
from kiln.tasks.store import TaskItem, TaskStore

log = logging.getLogger("kiln.tasks")


class ToolRunner(Protocol):
    """What the worker needs from the catalog backend (`kiln.service.CatalogBackend`)."""

    async def find(self, name: str, revision: int) -> Tool | None:
        """The enabled catalog tool with this name, at this revision."""
        ...

    def view(self, tool: Tool) -> ToolView: ...

    async def execute(
        self, tool: Tool, arguments: Mapping[str, Any], *, time_left_s: float | None
    ) -> tuple[ToolOutcome, Any]: ...


STOPPED = "The server stopped while this task ran, and its run was stopped; call the tool again."


def internal_error(message: str) -> dict[str, Any]:
    return {"code": -32603, "message": message}


class TaskWorker:
    def __init__(
        self,
        store: TaskStore,
        tools: ToolRunner,
        shaper: ToolCaller,
        settings: TaskSettings,
        *,
        clock: Callable[[], float] = time.time,
        now_iso: Callable[[], str],
    ) -> None:
        self._store = store
        self._tools = tools
        self._shaper = shaper
        self._settings = settings
        self._clock = clock
        self._now_iso = now_iso

    async def run(
        self,
        owner: str,
        task_id: str,
        *,
        time_left_s: float | None = None,
        cancelled: asyncio.Event | None = None,
        slot: asyncio.Semaphore | None = None,
    ) -> str:
        """Run the task to its end; returns the status it ends in (or found it in).

        `slot` bounds how many task runs of this process use the runner at once; a task
        waiting for one keeps its lease and can be cancelled meanwhile.
        """
        item = await asyncio.to_thread(self._store.get, owner, task_id)
        if item is None or item.status != "working":
            return item.status if item else "missing"
        if not await self._renew(item):
            return "cancelled"
        tool = await self._tools.find(item.tool, item.revision)
        if tool is None:
            return await self._fail(
                item, f"Tool '{item.tool}' was removed or disabled before its task ran"
            )
        run = asyncio.create_task(self._execute(tool, item, time_left_s, slot))
        try:
            watched = await self._watch(item, run, cancelled)
        except asyncio.CancelledError:
            # This worker is being stopped (the server shuts down): stop the run with it and
            # say so in the task. Should that write fail too, the lease runs out instead.
            run.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await run
            with contextlib.suppress(Exception):
                await self._fail(item, STOPPED)
            raise
        if not watched:
            return "cancelled"
        try:
            outcome, _ = run.result()
        except Exception:
            log.exception("task %s: the run failed", task_id)
            return await self._fail(item, "Internal error: the run could not finish")
        try:
            # Output validation may be costly: off the event loop, as for calls.
            view = self._tools.view(tool)
            result = await asyncio.to_thread(self._shaper.shape, view, outcome, item.version)
        except RunFailedError as error:
            return await self._settle(item, "failed", error=error_object(error)["error"])
        return await self._settle(item, "completed", result=result)

    async def _execute(
        self, tool: Tool, item: TaskItem, time_left_s: float | None, slot: asyncio.Semaphore | None
    ) -> tuple[ToolOutcome, Any]:
        if slot is None:
            return await self._tools.execute(tool, item.arguments, time_left_s=time_left_s)
        async with slot:
            return await self._tools.execute(tool, item.arguments, time_left_s=time_left_s)

    async def _watch(
        self, item: TaskItem, run: asyncio.Task[Any], cancelled: asyncio.Event | None
    ) -> bool:
        """Wait for the run, renewing the lease; False (run stopped) when it was cancelled."""
        waiter = asyncio.ensure_future(cancelled.wait()) if cancelled else None
        try:
            while not run.done():
                pending: set[asyncio.Future[Any]] = {run}
                if waiter is not None:
                    pending.add(waiter)
                await asyncio.wait(
                    pending, timeout=self._settings.heartbeat_s, return_when="FIRST_COMPLETED"
                )
                if run.done():
                    break
                if (waiter is not None and waiter.done()) or not await self._renew(item):
                    run.cancel()  # the runner kills the process tree before this resolves
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await run
                    log.info("task %s cancelled; its run was stopped", item.task_id)
                    return False
            return True
        finally:
            if waiter is not None:
                waiter.cancel()

    async def _renew(self, item: TaskItem) -> bool:
        lease = self._clock() + self._settings.lease_s
        return await asyncio.to_thread(self._store.renew, item, lease_until=lease)

    async def _fail(self, item: TaskItem, message: str) -> str:
        return await self._settle(item, "failed", error=internal_error(message))

    async def _settle(
        self,
        item: TaskItem,
        status: str,
        *,
        result: Mapping[str, Any] | None = None,
        error: Mapping[str, Any] | None = None,
    ) -> str:
        message = str(error["message"]) if error is not None else None
        done = await asyncio.to_thread(
            self._store.settle,
            item,
            status,
            now=self._now_iso(),
            message=message,
            result=result,
            error=error,
        )
        if not done:  # cancelled (or failed by a reader) while the result was on its way
            found = await asyncio.to_thread(self._store.get, item.owner, item.task_id)
            return found.status if found else "missing"
        return status


def handle_event(event: Any, context: Any, worker: TaskWorker) -> dict[str, str]:
    """The worker function's invocation: `{"kiln_task": {"owner": ..., "id": ...}}`."""
    body = event.get("kiln_task") if isinstance(event, dict) else None
    owner = body.get("owner") if isinstance(body, dict) else None
    task_id = body.get("id") if isinstance(body, dict) else None
    if not isinstance(owner, str) or not isinstance(task_id, str):
        raise ValueError('a worker event is {"kiln_task": {"owner": <string>, "id": <string>}}')
    left = context.get_remaining_time_in_millis() / 1000 if context is not None else None
    status = asyncio.run(worker.run(owner, task_id, time_left_s=left))
    log.info("task %s ended as %s", task_id, status)
    return {"task": task_id, "status": status}
