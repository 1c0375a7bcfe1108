"""Work a request leaves with `later` starts once its response has been sent
(kiln.runner.afterwards), and never waits for an answer that is not coming."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from kiln.api.middleware import AfterAnswer
from kiln.runner.afterwards import alone, later


def serve(handler: Any, events: list[str]) -> list[str]:
    """One HTTP request through `AfterAnswer(handler)`; `events` gets "sent" when the last
    body message leaves, in order with what the kept work appends."""

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body" and not message.get("more_body", False):
            events.append("sent")

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def respond() -> None:
        scope = {"type": "http", "method": "POST", "path": "/mcp", "headers": []}
        await AfterAnswer(handler)(scope, receive, send)

    asyncio.run(respond())
    return events


async def answer(send: Any, body: bytes = b"ok") -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": body})


def test_work_kept_during_a_request_starts_after_its_response_was_sent() -> None:
    events: list[str] = []

    async def handler(scope: Any, receive: Any, send: Any) -> None:
        later(lambda: events.append("cleanup"))
        # A thread of the request (the ledger entry's hold runs in one) keeps work too.
        await asyncio.to_thread(later, lambda: events.append("from a thread"))
        await asyncio.sleep(0)  # a turn of the loop: work kept must not start on it
        events.append("answering")
        await answer(send)

    assert serve(handler, events) == ["answering", "sent", "cleanup", "from a thread"]


def test_work_kept_by_a_request_that_failed_still_runs() -> None:
    events: list[str] = []

    async def handler(scope: Any, receive: Any, send: Any) -> None:
        later(lambda: events.append("cleanup"))
        raise RuntimeError("the app failed before answering")

    with pytest.raises(RuntimeError, match="failed before answering"):
        serve(handler, events)
    assert events == ["cleanup"]


def test_work_that_raises_does_not_stop_the_rest(caplog: pytest.LogCaptureFixture) -> None:
    events: list[str] = []

    def broken() -> None:
        raise ValueError("broken work")

    async def handler(scope: Any, receive: Any, send: Any) -> None:
        later(broken)
        later(lambda: events.append("next"))
        await answer(send)

    assert serve(handler, events) == ["sent", "next"]
    assert "broken work" in caplog.text


def test_outside_a_request_work_runs_on_the_loops_next_turn_or_at_once_in_a_thread() -> None:
    events: list[str] = []

    async def outside() -> None:
        later(lambda: events.append("soon"))
        events.append("still in the caller")
        await asyncio.sleep(0)
        events.append("after a turn")

    asyncio.run(outside())
    assert events == ["still in the caller", "soon", "after a turn"]

    done: list[str] = []
    thread = threading.Thread(target=later, args=(lambda: done.append("at once"),))
    thread.start()
    thread.join()
    assert done == ["at once"]


def test_work_kept_after_the_request_ended_is_not_lost() -> None:
    """A task started by a request (an MCP task's run) outlives it, and its context: its work
    runs soon, not at an answer that has already been sent."""
    events: list[str] = []
    outlived: list[asyncio.Task[None]] = []

    async def handler(scope: Any, receive: Any, send: Any) -> None:
        async def task_run() -> None:
            await asyncio.sleep(0.01)
            later(lambda: events.append("task's cleanup"))

        outlived.append(asyncio.ensure_future(task_run()))
        await answer(send)

    async def respond_then_wait() -> None:
        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.body":
                events.append("sent")

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": b"", "more_body": False}

        scope = {"type": "http", "method": "POST", "path": "/mcp", "headers": []}
        await AfterAnswer(handler)(scope, receive, send)
        await outlived[0]
        await asyncio.sleep(0)

    asyncio.run(respond_then_wait())
    assert events == ["sent", "task's cleanup"]


def test_an_answer_is_alone_only_while_no_other_is_being_made() -> None:
    seen: dict[str, bool] = {}
    both_in = threading.Barrier(2)

    async def handler(scope: Any, receive: Any, send: Any) -> None:
        seen[scope["path"]] = alone()
        await answer(send)

    serve(handler, [])
    assert seen == {"/mcp": True}

    async def overlapping(scope: Any, receive: Any, send: Any) -> None:
        await asyncio.to_thread(both_in.wait, 10)  # both requests are in flight
        seen[scope["path"]] = alone()
        await asyncio.to_thread(both_in.wait, 10)  # neither has ended before both looked
        await answer(send)

    async def two_at_once() -> None:
        async def send(message: dict[str, Any]) -> None:
            pass

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": b"", "more_body": False}

        await asyncio.gather(*(
            AfterAnswer(overlapping)({"type": "http", "path": path, "headers": []}, receive, send)
            for path in ("/one", "/two")
        ))  # fmt: skip

    asyncio.run(two_at_once())
    assert seen == {"/mcp": True, "/one": False, "/two": False}
    assert alone(), "an answer that ended is still counted"
