"""MCP over stdio: newline-delimited JSON-RPC on a reader/writer pair, for desktop clients.

Same protocol as HTTP, minus the HTTP parts (no headers, Origin or status codes). A stdio
connection is a session, so the version agreed by `initialize` is remembered and shapes
later results; a message carrying the 2026-07-28 `_meta` envelope is served statelessly.
Requests run concurrently (a slow tool does not hold up `ping`); each reply is one line.
A tools/call says what it has to say before its reply, each message a line: progress (for a
request with `_meta.progressToken`) and logs as notifications, and on 2025 wires its questions
as requests to the client (`elicitation/create`, `sampling/createMessage`, `roots/list`), held
open until the client writes its responses back as lines (protocol/streaming.py). The kinds
of question asked are the ones the client declared at `initialize` (elicitation, sampling,
roots); when stdin ends, a question still waiting ends its call at once.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from typing import Any

from kiln.local.linewise import answer_lines
from kiln.protocol.backend import CallContext
from kiln.protocol.dispatch import error_reply
from kiln.protocol.errors import InternalError, InvalidRequestError, ProtocolError
from kiln.protocol.http import McpEndpoint
from kiln.protocol.jsontext import load_json
from kiln.protocol.talking import askable

log = logging.getLogger(__name__)

_NO_HEADERS: dict[str, str] = {}


async def serve_stdio(
    endpoint: McpEndpoint,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    ctx: CallContext | None = None,
) -> None:
    """Serve until `reader` reaches end of file, then finish the requests still running.

    Every line gets its answer (or none, for a notification); no input ends the loop.
    """
    # A stdio process may hold a call open for the client's answers, unlike a Lambda POST.
    context = replace(ctx or CallContext(), can_hold=True)
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
        nonlocal negotiated, context
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
            # The session's client said at initialize which questions it answers.
            context = replace(context, declared=askable(_params(line).get("capabilities")))
        if reply.stream is not None:  # a call's notifications and questions, then its reply
            async for message in reply.stream:
                await send(message)
        elif reply.body is not None:
            await send(reply.body)

    async def too_long(size: int) -> None:
        message = f"Invalid Request: the line is {size} bytes, the limit is {limit}"
        await refuse(InvalidRequestError(message))

    def ended() -> None:  # no answer to a held question can come any more
        dispatcher.abandon_questions("the client closed its input before answering")

    await answer_lines(reader, limit, answer, too_long, ended)


def _params(line: bytes) -> dict[str, Any]:
    message = load_json(line.decode("utf-8"))
    params = message.get("params") if isinstance(message, dict) else None
    return params if isinstance(params, dict) else {}
