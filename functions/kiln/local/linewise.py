"""The one reading loop of Kiln's stdio servers (`kiln stdio`, and its `--url` bridge)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

_CHUNK = 64 * 1024


class TooLong:
    """Stands for a line longer than the limit (its bytes were read and dropped)."""

    def __init__(self, size: int) -> None:
        self.size = size


async def read_lines(reader: asyncio.StreamReader, limit: int) -> AsyncIterator[bytes | TooLong]:
    """Lines without their newline, of any length: one over `limit` bytes comes as `TooLong`.

    `StreamReader.readline` raises on a line over its buffer limit (64 KiB by default) and
    loses its place; this reads in chunks and drops the rest of an over-long line, so the
    next line is read whole.
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
                yield TooLong(dropped + len(pending) + len(piece))
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
        yield TooLong(dropped)
    elif pending:
        yield bytes(pending)


Answer = Callable[[bytes], Coroutine[Any, Any, None]]


async def answer_lines(
    reader: asyncio.StreamReader,
    limit: int,
    answer: Answer,
    too_long: Callable[[int], Coroutine[Any, Any, None]],
    at_end: Callable[[], None] | None = None,
) -> None:
    """Answer every non-blank line of `reader` concurrently (a slow tool does not hold up
    `ping`), except `initialize`: it is answered before reading on, so later lines see the
    agreed version. A line over `limit` bytes goes to `too_long` (with its size) instead.
    Once the lines end, `at_end` is called (no answer to a question can come any more), and
    this returns when every answer has been sent."""
    running: set[asyncio.Task[None]] = set()
    async for line in read_lines(reader, limit):
        if isinstance(line, TooLong):
            await too_long(line.size)
            continue
        if not line.strip():
            continue
        if b'"initialize"' in line:
            await answer(line)
            continue
        task = asyncio.create_task(answer(line))
        running.add(task)
        task.add_done_callback(running.discard)
    if at_end is not None:
        at_end()
    if running:
        await asyncio.gather(*running)
