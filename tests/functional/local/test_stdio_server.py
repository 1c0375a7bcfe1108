"""MCP over stdio: newline-delimited JSON-RPC through real OS pipes (no subprocess)."""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

from kiln.local.stdio import serve_stdio
from kiln.protocol import McpEndpoint, ProtocolSettings
from support.protocol import FakeBackend, add_vat, add_vat_tool, meta


async def _exchange(lines: list[Any], backend: FakeBackend) -> list[dict[str, Any]]:
    loop = asyncio.get_running_loop()
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    reader = asyncio.StreamReader()
    read_transport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(in_r, "rb")
    )
    write_transport, write_protocol = await loop.connect_write_pipe(
        lambda: asyncio.StreamReaderProtocol(asyncio.StreamReader()), os.fdopen(out_w, "wb")
    )
    writer = asyncio.StreamWriter(write_transport, write_protocol, None, loop)
    payload = b"".join(
        (line if isinstance(line, bytes) else json.dumps(line).encode()) + b"\n" for line in lines
    )
    with os.fdopen(in_w, "wb") as feed:
        feed.write(payload)
    endpoint = McpEndpoint(backend, ProtocolSettings())
    await asyncio.wait_for(serve_stdio(endpoint, reader, writer), timeout=10)
    writer.close()
    await writer.wait_closed()
    read_transport.close()
    with os.fdopen(out_r, "rb") as out:
        return [json.loads(line) for line in out.read().splitlines()]


def exchange(lines: list[Any]) -> list[dict[str, Any]]:
    backend = FakeBackend()
    backend.add(add_vat_tool(title="Add VAT"), add_vat)
    return asyncio.run(_exchange(lines, backend))


def test_stdio_session_initializes_lists_and_calls() -> None:
    replies = exchange(
        [
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "desktop", "version": "1"},
                },
            },
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
            {
                "jsonrpc": "2.0",
                "id": 3,
                "method": "tools/call",
                "params": {"name": "add_vat", "arguments": {"net": 10}},
            },
        ]
    )
    by_id = {r["id"]: r for r in replies}
    assert set(by_id) == {1, 2, 3}
    assert by_id[1]["result"]["protocolVersion"] == "2025-06-18"
    assert by_id[2]["result"]["tools"][0]["title"] == "Add VAT"  # 2025-06-18 knows titles
    assert by_id[3]["result"]["isError"] is False


def test_stdio_remembers_an_old_negotiated_version() -> None:
    replies = exchange(
        [
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {"protocolVersion": "2024-11-05", "capabilities": {}},
            },
            {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        ]
    )
    tool = next(r for r in replies if r["id"] == 2)["result"]["tools"][0]
    assert "title" not in tool


def test_stdio_serves_modern_requests_without_headers() -> None:
    replies = exchange(
        [
            {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": meta()}},
            {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {"_meta": meta()}},
        ]
    )
    by_id = {r["id"]: r for r in replies}
    assert by_id[1]["result"]["supportedVersions"] == ["2026-07-28"]
    assert by_id[2]["result"]["resultType"] == "complete"


def test_stdio_answers_a_bad_line_with_a_parse_error_and_keeps_going() -> None:
    replies = exchange([b"{not json", {"jsonrpc": "2.0", "id": 2, "method": "ping"}, b"   "])
    assert replies[0]["error"]["code"] == -32700
    assert replies[0]["id"] is None
    assert replies[1] == {"jsonrpc": "2.0", "id": 2, "result": {}}
