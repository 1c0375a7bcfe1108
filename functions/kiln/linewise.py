"""The one reading loop of Kiln's stdio servers (`kiln stdio`, and its `--url` bridge)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, Callable, Coroutine
from typing import Any


async def answer_lines(
    lines: AsyncIterable[bytes], answer: Callable[[bytes], Coroutine[Any, Any, None]]
) -> None:
    """Answer every non-blank line concurrently (a slow tool does not hold up `ping`), except
    `initialize`: it is answered before reading on, so later lines see the agreed version.
    Returns once the lines end and every answer has been sent."""
    running: set[asyncio.Task[None]] = set()
    async for line in lines:
        if not line.strip():
            continue
        if b'"initialize"' in line:
            await answer(line)
            continue
        task = asyncio.create_task(answer(line))
        running.add(task)
        task.add_done_callback(running.discard)
    if running:
        await asyncio.gather(*running)
