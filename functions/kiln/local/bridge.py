"""`kiln stdio --url URL`: MCP over stdin/stdout, relayed to a Kiln server's /mcp over HTTP.

For desktop clients that only launch processes: each line read is POSTed as it is, with the
headers Streamable HTTP asks for (the negotiated `MCP-Protocol-Version` after `initialize`;
for 2026-07-28 messages the version, `Mcp-Method` and `Mcp-Name` from the body), and each
JSON-RPC message in the answer is written back as one line as soon as it arrives: a call's
progress, logs and (on 2025 wires, from a server that holds calls) questions come before its
result, and the client's responses to the questions are POSTed like any other line. Requests
run concurrently, as they do in the local `kiln stdio`.

One thing is added: a 2025 `tools/call` carries the capabilities its client declared at
`initialize`, in `params._meta["io.modelcontextprotocol/clientCapabilities"]`, since the
server, which keeps no session, cannot remember them; so a client that takes URL
elicitations gets one (kiln.protocol.urlmode) through the bridge as it would over stdio.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol

from mcp_types import PROTOCOL_VERSION_META_KEY

from kiln.local.linewise import answer_lines
from kiln.protocol.errors import jsonrpc_error
from kiln.protocol.spec import CLIENT_CAPABILITIES_META_KEY, INTERNAL_ERROR, INVALID_REQUEST
from kiln.runner.ceiling import LAMBDA_MAX_TIMEOUT_S
from kiln.settings import LOCAL_URL

ACCEPT = "application/json, text/event-stream"
_NAME_FIELD = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}


class LineWriter(Protocol):
    def write(self, data: bytes) -> None: ...

    async def drain(self) -> None: ...


def mcp_url(url: str) -> str:
    """`URL` itself when it names an endpoint path, else `URL/mcp`."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"--url: give a full http(s) URL such as {LOCAL_URL}, not {url!r}")
    if parts.path in ("", "/"):
        return url.rstrip("/") + "/mcp"
    return url


class Bridge:
    def __init__(
        self,
        url: str,
        key: str | None,
        *,
        timeout_s: float = LAMBDA_MAX_TIMEOUT_S,
        max_line_bytes: int = 1024 * 1024,
    ) -> None:
        self.url = mcp_url(url)
        self.key = key
        self.timeout_s = timeout_s
        self.max_line_bytes = max_line_bytes  # a longer line is refused here, not relayed
        self.negotiated: str | None = None
        self.capabilities: dict[str, Any] | None = None  # what the client declared at initialize

    def headers_for(self, message: Any) -> dict[str, str]:
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
        }
        if self.key:
            headers["Authorization"] = f"Bearer {self.key}"
        params = message.get("params") if isinstance(message, dict) else None
        meta = params.get("_meta") if isinstance(params, dict) else None
        if isinstance(meta, dict) and isinstance(meta.get(PROTOCOL_VERSION_META_KEY), str):
            method = str(message.get("method", ""))
            headers["MCP-Protocol-Version"] = meta[PROTOCOL_VERSION_META_KEY]
            headers["Mcp-Method"] = method
            field = _NAME_FIELD.get(method)
            if field and isinstance(params, dict) and isinstance(params.get(field), str):
                headers["Mcp-Name"] = params[field]
        elif self.negotiated:
            headers["MCP-Protocol-Version"] = self.negotiated
        return headers

    def relay(self, line: bytes, out: Callable[[bytes], None]) -> None:
        """POST one message; hand each JSON-RPC message of the answer to `out` as it arrives
        (an event stream's notifications and questions before its result: a held call's
        question needs its answer before the stream can end)."""
        try:
            message = json.loads(line)
        except ValueError:
            message = None
        line = self.carry_capabilities(message, line)
        request = urllib.request.Request(  # noqa: S310  (scheme checked in mcp_url)
            self.url, data=line, method="POST", headers=self.headers_for(message)
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:  # noqa: S310
                if "event-stream" in response.headers.get("content-type", ""):
                    for reply in _sse_messages(response):
                        self._note_version(message, reply)
                        out(reply)
                    return
                body = response.read()
        except urllib.error.HTTPError as error:
            body = error.read()
            if "json" not in error.headers.get("content-type", ""):
                body = b"\n".join(_error_for(message, f"HTTP {error.code} from {self.url}"))
        except (urllib.error.URLError, OSError) as error:
            reason = getattr(error, "reason", error)
            body = b"\n".join(_error_for(message, f"cannot reach {self.url} ({reason})"))
        if body.strip():
            self._note_version(message, body.strip())
            out(body.strip())

    def carry_capabilities(self, message: Any, line: bytes) -> bytes:
        """The line, with the session's capabilities in a 2025 `tools/call`'s `_meta`."""
        if not isinstance(message, dict):
            return line
        params = message.get("params")
        if message.get("method") == "initialize" and isinstance(params, dict):
            declared = params.get("capabilities")
            self.capabilities = declared if isinstance(declared, dict) else None
            return line
        if message.get("method") != "tools/call" or self.capabilities is None:
            return line
        if not isinstance(params, dict):
            return line
        meta = params.get("_meta", {})
        if not isinstance(meta, dict) or PROTOCOL_VERSION_META_KEY in meta:
            return line  # a 2026-07-28 request says its own, or a _meta the server refuses
        if CLIENT_CAPABILITIES_META_KEY in meta:
            return line
        meta = {**meta, CLIENT_CAPABILITIES_META_KEY: self.capabilities}
        return json.dumps({**message, "params": {**params, "_meta": meta}}).encode()

    def _note_version(self, message: Any, reply: bytes) -> None:
        if not (isinstance(message, dict) and message.get("method") == "initialize"):
            return
        try:
            version = json.loads(reply)["result"]["protocolVersion"]
        except (ValueError, KeyError, TypeError):
            return
        if isinstance(version, str):
            self.negotiated = version


def _sse_messages(lines: Iterable[bytes]) -> Iterator[bytes]:
    """The data of each event of an event stream, as each event ends."""
    data: list[bytes] = []
    for raw in itertools.chain(lines, [b""]):
        if raw.startswith(b"data:"):
            data.append(raw[5:].strip())
        elif not raw.strip() and data:
            yield b"\n".join(data)
            data = []


def _error_for(message: Any, text: str) -> list[bytes]:
    """A JSON-RPC error for a request the server could not answer (notifications get none)."""
    if not isinstance(message, dict) or "id" not in message or "method" not in message:
        return []
    error = jsonrpc_error(INTERNAL_ERROR, text, request_id=message["id"])
    return [json.dumps(error).encode()]


async def serve_bridge(bridge: Bridge, reader: asyncio.StreamReader, writer: LineWriter) -> None:
    """Relay until `reader` reaches end of file, then finish the requests still running."""
    lock = asyncio.Lock()

    async def write(replies: list[bytes]) -> None:
        async with lock:
            for reply in replies:
                writer.write(reply + b"\n")
            await writer.drain()

    loop = asyncio.get_running_loop()

    def out(reply: bytes) -> None:  # on the relaying thread: written in order, one by one
        asyncio.run_coroutine_threadsafe(write([reply]), loop).result()

    async def answer(line: bytes) -> None:
        await asyncio.to_thread(bridge.relay, line, out)

    async def too_long(size: int) -> None:
        # The same refusal as the local `kiln stdio`: the id of a line not read is unknown.
        text = f"Invalid Request: the line is {size} bytes, the limit is {bridge.max_line_bytes}"
        error = jsonrpc_error(INVALID_REQUEST, text)
        await write([json.dumps(error).encode()])

    await answer_lines(reader, bridge.max_line_bytes, answer, too_long)
