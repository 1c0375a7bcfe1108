"""MCP over stdio: newline-delimited JSON-RPC on a reader/writer pair, for desktop clients.

Same protocol as HTTP, minus the HTTP parts (no headers, Origin or status codes). A stdio
connection is a session, so the version agreed by `initialize` is remembered and shapes
later results; a message carrying the 2026-07-28 `_meta` envelope is served statelessly.
Requests run concurrently (a slow tool does not hold up `ping`); each reply is one line.
"""

from __future__ import annotations

import asyncio
import logging

from kiln.protocol.backend import CallContext
from kiln.protocol.http import McpEndpoint

log = logging.getLogger(__name__)

_NO_HEADERS: dict[str, str] = {}


async def serve_stdio(
    endpoint: McpEndpoint,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    ctx: CallContext | None = None,
) -> None:
    """Serve until `reader` reaches end of file, then finish the requests still running."""
    context = ctx or CallContext()
    dispatcher = endpoint.dispatcher
    negotiated: str | None = None
    write_lock = asyncio.Lock()
    running: set[asyncio.Task[None]] = set()

    async def answer(line: bytes) -> None:
        nonlocal negotiated
        reply = await dispatcher.handle_body(
            line, _NO_HEADERS, context, http=False, legacy_version=negotiated
        )
        if reply.negotiated is not None:
            negotiated = reply.negotiated
        if reply.body is None:
            return
        async with write_lock:
            writer.write(reply.body + b"\n")
            await writer.drain()

    while True:
        line = await reader.readline()
        if not line:
            break
        if not line.strip():
            continue
        if b'"initialize"' in line:
            # Answer the handshake before reading on, so later lines see the agreed version.
            await answer(line)
            continue
        task = asyncio.create_task(answer(line))
        running.add(task)
        task.add_done_callback(running.discard)
    if running:
        await asyncio.gather(*running)
