"""The protocol alone: McpEndpoint over a static 100-tool backend in a bare ASGI app.

    python -m bench.protocol.harness PORT

Used by run.py to separate what the protocol layer costs from what `kiln dev` adds around
it (FastAPI, the per-request catalog version read against the embedded emulator).
"""

from __future__ import annotations

import sys
from typing import Any

import uvicorn

from bench.protocol.wire_cost import StaticBackend
from kiln.protocol import CallContext, HttpRequest, McpEndpoint, ProtocolSettings

endpoint = McpEndpoint(StaticBackend(), ProtocolSettings(loopback_bind=True))


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
    request = HttpRequest(scope["method"], headers, b"".join(chunks))
    response = await endpoint.handle(request, CallContext())
    await send(
        {
            "type": "http.response.start",
            "status": response.status,
            "headers": [(k.encode(), v.encode()) for k, v in response.headers.items()],
        }
    )
    await send({"type": "http.response.body", "body": response.body})


if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
