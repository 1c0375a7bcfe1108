"""MCP over stdio: newline-delimited JSON-RPC on a reader/writer pair, for desktop clients.

Same protocol as HTTP, minus the HTTP parts (no headers, Origin or status codes). A stdio
connection is a session, so the version agreed by `initialize` is remembered and shapes
later results; a message carrying the 2026-07-28 `_meta` envelope is served statelessly.
Requests run concurrently (a slow tool does not hold up `ping`); each reply is one line.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

from kiln.linewise import answer_lines
from kiln.protocol.backend import CallContext
from kiln.protocol.dispatch import error_reply
from kiln.protocol.errors import InternalError, InvalidRequestError, ProtocolError
from kiln.protocol.http import McpEndpoint

log = logging.getLogger(__name__)

_NO_HEADERS: dict[str, str] = {}
_CHUNK = 64 * 1024


class _TooLong:
    """Stands for a line longer than the limit (its bytes were read and dropped)."""

    def __init__(self, size: int) -> None:
        self.size = size


async def read_lines(reader: asyncio.StreamReader, limit: int) -> AsyncIterator[bytes | _TooLong]:
    """Lines without their newline, of any length: one over `limit` bytes comes as `_TooLong`.

    `StreamReader.readline` raises on a line over its buffer limit and loses its place; this
    reads in chunks and drops the rest of an over-long line, so the next line is read whole.
    """
    pending = bytearray()
    dropped = 0  # > 0 while skipping the rest of an over-long line
    while True:
        chunk = await reader.read(_CHUNK)
        if not chunk:
            break
        start = 0
        while (end := chunk.find(b"\n", start)) != -1:
            piece = chunk[start:end]
            if dropped or len(pending) + len(piece) > limit:
                yield _TooLong(dropped + len(pending) + len(piece))
                dropped = 0
            else:
                yield bytes(pending + piece)
            pending.clear()
            start = end + 1
        rest = chunk[start:]
        if dropped or len(pending) + len(rest) > limit:
            dropped += len(pending) + len(rest)
            pending.clear()
        else:
            pending += rest
    if dropped:
        yield _TooLong(dropped)
    elif pending:
        yield bytes(pending)


async def serve_stdio(
    endpoint: McpEndpoint,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    ctx: CallContext | None = None,
) -> None:
    """Serve until `reader` reaches end of file, then finish the requests still running.

    Every line gets its answer (or none, for a notification); no input ends the loop.
    """
    context = ctx or CallContext()
    dispatcher = endpoint.dispatcher
    limit = endpoint.settings.max_body_bytes
    negotiated: str | None = None
    write_lock = asyncio.Lock()

    async def send(body: bytes) -> None:
        async with write_lock:
            try:
                writer.write(body + b"\n")
                await writer.drain()
            except (ConnectionError, OSError):  # the client closed its end: nothing to tell
                log.warning("stdout is closed; a reply was dropped")

    async def refuse(error: ProtocolError) -> None:
        reply = error_reply(error)
        assert reply.body is not None
        await send(reply.body)

    async def answer(line: bytes) -> None:
        nonlocal negotiated
        try:
            reply = await dispatcher.handle_body(
                line, _NO_HEADERS, context, http=False, legacy_version=negotiated
            )
        except Exception:
            log.exception("unexpected failure answering a stdio line")
            await refuse(InternalError("Internal error"))
            return
        if reply.negotiated is not None:
            negotiated = reply.negotiated
        if reply.body is not None:
            await send(reply.body)

    async def lines() -> AsyncIterator[bytes]:
        async for line in read_lines(reader, limit):
            if isinstance(line, _TooLong):
                message = f"Invalid Request: the line is {line.size} bytes, the limit is {limit}"
                await refuse(InvalidRequestError(message))
                continue
            yield line

    await answer_lines(lines(), answer)
