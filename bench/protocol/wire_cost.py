"""What the official mcp-types models cost on the hot path, against plain dicts.

    python -m bench.protocol.wire_cost

Prints the import time of `kiln.protocol` and `mcp_types` (fresh interpreters, median of 5)
and per-request microseconds for: a 100-tool tools/list result built through the models,
the same built from plain dicts, Kiln's cached path (serialised once per catalog, version
and page), and a tools/call result through `CallToolResult` versus a dict.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import subprocess
import sys
import timeit
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from mcp_types import CallToolResult, ListToolsResult, TextContent, Tool

from kiln.protocol import (
    CallContext,
    HttpRequest,
    McpEndpoint,
    ProtocolSettings,
    ToolOutcome,
    ToolView,
)

SCHEMA = {
    "type": "object",
    "properties": {"net": {"type": "number", "minimum": 0}, "note": {"type": "string"}},
    "required": ["net"],
}
VIEWS = [
    ToolView(name=f"filler_{i:04d}", description=f"Filler tool {i}.", input_schema=SCHEMA)
    for i in range(100)
]


class StaticBackend:
    async def list_tools(self, ctx: CallContext) -> Sequence[ToolView]:
        return VIEWS

    async def get_tool(self, name: str, ctx: CallContext) -> ToolView | None:
        return VIEWS[0]

    async def call_tool(
        self, tool: ToolView, arguments: Mapping[str, Any], ctx: CallContext
    ) -> ToolOutcome:
        return ToolOutcome(text='{"ok": true}', is_error=False, stdout='{"ok": true}')


def import_seconds(module: str) -> float:
    runs = []
    for _ in range(5):
        out = subprocess.run(
            [sys.executable, "-X", "importtime", "-c", f"import {module}"],
            capture_output=True,
            text=True,
            check=True,
        ).stderr
        line = next(x for x in out.splitlines() if x.rstrip().endswith(f"| {module}"))
        runs.append(int(line.split("|")[1]) / 1e6)
    return statistics.median(runs)


def per_call_us(fn: Callable[[], object], number: int = 200) -> float:
    return min(timeit.repeat(fn, number=number, repeat=5)) / number * 1e6


def models_list() -> bytes:
    tools = [
        Tool(name=v.name, description=v.description, input_schema=dict(v.input_schema))
        for v in VIEWS
    ]
    result = ListToolsResult(tools=tools).model_dump(by_alias=True, exclude_none=True, mode="json")
    return json.dumps(result).encode()


def dicts_list() -> bytes:
    tools = [
        {"name": v.name, "description": v.description, "inputSchema": v.input_schema} for v in VIEWS
    ]
    return json.dumps({"tools": tools}).encode()


def main() -> None:
    print(f"import kiln.protocol: {import_seconds('kiln.protocol') * 1000:.0f} ms")
    print(f"import mcp_types:     {import_seconds('mcp_types') * 1000:.0f} ms")
    endpoint = McpEndpoint(StaticBackend(), ProtocolSettings())
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).encode()
    request = HttpRequest(
        "POST",
        {"content-type": "application/json", "mcp-protocol-version": "2025-11-25"},
        body,
    )
    ctx = CallContext()
    loop = asyncio.new_event_loop()

    def kiln_list() -> object:
        return loop.run_until_complete(endpoint.handle(request, ctx))

    rows = [
        ("tools/list 100 tools via mcp-types models", per_call_us(models_list)),
        ("tools/list 100 tools via plain dicts", per_call_us(dicts_list)),
        ("tools/list 100 tools, Kiln endpoint (cached)", per_call_us(kiln_list)),
        (
            "tools/call result via CallToolResult",
            per_call_us(
                lambda: CallToolResult(content=[TextContent(text="x" * 200)]).model_dump(
                    by_alias=True, exclude_none=True
                ),
                number=5000,
            ),
        ),
        (
            "tools/call result as a dict",
            per_call_us(
                lambda: {"content": [{"type": "text", "text": "x" * 200}], "isError": False},
                number=5000,
            ),
        ),
    ]
    for label, micros in rows:
        print(f"{label:48} {micros:9.1f} µs")
    loop.close()


if __name__ == "__main__":
    main()
