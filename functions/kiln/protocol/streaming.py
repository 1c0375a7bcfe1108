"""A tools/call answered as Server-Sent Events: notifications first, then the response.

Only when the client accepts `text/event-stream`, and only once there is something to say
before the result: a call that finishes without a notification is answered as plain JSON,
as before. Under Mangum (Lambda) the body is buffered, so the events arrive together with
the result; under uvicorn (kiln dev) each goes out as it happens. Over stdio the same stream
is written as lines (each message bare, one a line), before the call's response line.

`PendingAnswers` lets a 2025-wire call held open in this process (kiln dev, kiln stdio) ask
the client: the question goes out on the stream as a JSON-RPC request with an unguessable id,
and the client POSTs its JSON-RPC response to the endpoint (or writes it as a stdin line),
where `deliver` hands it over -- only to the call of the same caller that asked.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from kiln.protocol.backend import Question
from kiln.protocol.jsontext import dumps

T = TypeVar("T")
SSE = "text/event-stream"
ID_PREFIX = "kiln-ask-"
MAX_WAIT_S = 600.0  # longest a held call waits for the client's answers


def accepts_events(accept: str | None) -> bool:
    return accept is not None and SSE in accept.lower()


def frame(body: bytes) -> bytes:
    return b"event: message\ndata: " + body + b"\n\n"


class Outbox:
    """What a call says before its result, in order."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[bytes] = asyncio.Queue()

    def emit(self, message: dict[str, Any]) -> None:
        self.queue.put_nowait(dumps(message))


async def answer(
    run: Awaitable[T],
    outbox: Outbox,
    body: Callable[[T], bytes],
    framed: Callable[[bytes], bytes] = frame,
) -> T | AsyncIterator[bytes]:
    """The call's own answer when it ends before saying anything; else its event stream,
    whose last event is `body(answer)`. Each message goes out as `framed(message)`: an SSE
    event by default, the bare JSON-RPC message for stdio (which writes each as a line)."""
    task = asyncio.ensure_future(run)
    getter = asyncio.ensure_future(outbox.queue.get())
    waiting: set[asyncio.Future[Any]] = {task, getter}
    try:
        await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:
        task.cancel()
        getter.cancel()
        raise
    if task.done() and not getter.done():
        getter.cancel()
        if outbox.queue.empty():
            return task.result()
    return _events(task, getter, outbox, body, framed)


async def _events(
    task: asyncio.Future[T],
    getter: asyncio.Future[bytes],
    outbox: Outbox,
    body: Callable[[T], bytes],
    framed: Callable[[bytes], bytes],
) -> AsyncIterator[bytes]:
    try:
        while True:
            if getter.done() and not getter.cancelled():
                yield framed(getter.result())
                getter = asyncio.ensure_future(outbox.queue.get())
                continue
            if task.done():
                break
            waiting: set[asyncio.Future[Any]] = {task, getter}
            await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        getter.cancel()
        while not outbox.queue.empty():
            yield framed(outbox.queue.get_nowait())
        yield framed(body(task.result()))
    finally:  # the client went away: the call stops too
        getter.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task


class ClientAnswerError(Exception):
    """The client answered a question with an error, or not in time; the text says which."""


class PendingAnswers:
    """Questions asked of clients on held streams, by request id (this process only)."""

    def __init__(self) -> None:
        self._waiting: dict[str, tuple[str, asyncio.Future[Any]]] = {}
        self.abandoned: str | None = None  # why no answer can come any more, once so

    def owns(self, message: Any) -> bool:
        if not isinstance(message, dict) or "method" in message:
            return False
        rid = message.get("id")
        return isinstance(rid, str) and rid in self._waiting

    def deliver(self, message: dict[str, Any], caller: str) -> bool:
        """Hand a posted JSON-RPC response to the call that asked; False if not its caller's."""
        rid = message["id"]
        owner, future = self._waiting[rid]
        if owner != caller or future.done():
            return False
        future.set_result(message)
        return True

    def abandon(self, reason: str) -> None:
        """No answer can come any more: every question waiting, and any asked later, ends its
        call with `reason` at once."""
        self.abandoned = reason
        for _, future in list(self._waiting.values()):
            if not future.done():
                future.set_exception(ClientAnswerError(reason))

    def holder(self, outbox: Outbox, caller: str, wait_s: float) -> StreamHolder:
        return StreamHolder(self, outbox, caller, min(wait_s, MAX_WAIT_S))

    def _open(self, caller: str) -> tuple[str, asyncio.Future[Any]]:
        rid = ID_PREFIX + secrets.token_urlsafe(16)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting[rid] = (caller, future)
        return rid, future

    def _close(self, rid: str) -> None:
        self._waiting.pop(rid, None)


class StreamHolder:
    """Asks one held call's questions on its stream and waits for every answer."""

    def __init__(self, pending: PendingAnswers, outbox: Outbox, caller: str, wait_s: float):
        self._pending = pending
        self._outbox = outbox
        self._caller = caller
        self._wait_s = wait_s

    async def ask(self, questions: tuple[Question, ...]) -> dict[str, Any]:
        if self._pending.abandoned is not None:
            raise ClientAnswerError(self._pending.abandoned)
        opened: list[tuple[Question, str, asyncio.Future[Any]]] = []
        try:
            for question in questions:
                rid, future = self._pending._open(self._caller)
                opened.append((question, rid, future))
                request = {"method": question.method, "params": dict(question.params)}
                self._outbox.emit({"jsonrpc": "2.0", "id": rid, **request})
            futures = [future for _, _, future in opened]
            try:
                replies = await asyncio.wait_for(asyncio.gather(*futures), self._wait_s)
            except TimeoutError:
                raise ClientAnswerError(
                    f"the client did not answer within {self._wait_s:.0f} s"
                ) from None
            return {
                q.key: _result(q, reply) for (q, _, _), reply in zip(opened, replies, strict=True)
            }
        finally:
            for _, rid, _ in opened:
                self._pending._close(rid)


def _result(question: Question, reply: dict[str, Any]) -> Any:
    if "error" in reply:
        error = reply["error"] if isinstance(reply["error"], dict) else {}
        raise ClientAnswerError(
            f"the client answered {question.method} ('{question.key}') with error "
            f"{error.get('code')}: {str(error.get('message', ''))[:200]}"
        )
    return reply.get("result")
