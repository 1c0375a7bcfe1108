"""Smoke-test a deployed Kiln MCP endpoint with the official MCP Python SDK client.

usage: python infra/smoke_test.py URL [--token T] [--call NAME JSON]...
Lists the tools, then calls each named tool with its JSON arguments. Exit 0 only when every
named tool is listed and every call succeeds without isError. Needs `pip install mcp==2.3.0`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


async def smoke(url: str, token: str | None, calls: list[tuple[str, str]]) -> int:
    headers = {"Authorization": f"Bearer {token}"} if token else None
    async with (
        create_mcp_http_client(headers=headers) as http,
        Client(streamable_http_client(url, http_client=http), raise_exceptions=True) as client,
    ):
        print(f"{url}: protocol {client.protocol_version}")
        names = [tool.name for tool in (await client.list_tools()).tools]
        print(f"  tools: {', '.join(names) or '(none)'}")
        failures = 0
        for name, arguments in calls:
            if name not in names:
                print(f"  {name}: not listed", file=sys.stderr)
                failures += 1
                continue
            result = await client.call_tool(name, json.loads(arguments))
            text = " ".join(getattr(block, "text", "") for block in result.content)
            print(f"  {name}: {'ERROR ' if result.is_error else ''}{text[:200]}")
            failures += bool(result.is_error)
        return 1 if failures or not names else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url")
    parser.add_argument("--token", help="API key, when the stage refuses anonymous callers")
    parser.add_argument("--call", nargs=2, action="append", default=[], metavar=("NAME", "JSON"))
    args = parser.parse_args()
    try:
        return asyncio.run(smoke(args.url, args.token, [tuple(c) for c in args.call]))
    except Exception as error:  # unreachable endpoint, HTTP error, JSON-RPC error
        while isinstance(error, BaseExceptionGroup) and error.exceptions:
            error = error.exceptions[0]  # anyio task groups wrap the cause
        print(f"smoke test failed: {type(error).__name__}: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
