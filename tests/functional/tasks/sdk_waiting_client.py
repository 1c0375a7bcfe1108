"""An unattended caller: the official Python SDK (mcp 1.x) with tasks and no elicitation.

usage: python sdk_waiting_client.py URL KEY TOOL ARGS_JSON
Calls TOOL as a 2025-11-25 task, prints the created task as one JSON line (its status,
status message and `_meta`), then polls it to its end and prints one more line: every status
seen and the result. Runs in the yardstick virtualenv of mcp 1.x (the SDK that speaks core
tasks); it declares no elicitation capability (no callback), as an unattended agent.
"""

import asyncio
import json
import sys

import httpx
from mcp import ClientSession
from mcp.client.streamable_http import streamablehttp_client
from mcp.types import CallToolResult


async def main(url: str, key: str, tool: str, arguments: dict) -> None:
    headers = {"Authorization": f"Bearer {key}"}
    async with (
        streamablehttp_client(url, headers=headers, timeout=60) as (read, write, _),
        ClientSession(read, write) as session,
    ):
        init = await session.initialize()
        created = await session.experimental.call_tool_as_task(tool, arguments, ttl=600_000)
        task = created.task
        print(
            json.dumps(
                {
                    "protocol": init.protocolVersion,
                    "task_id": task.taskId,
                    "status": task.status,
                    "statusMessage": task.statusMessage,
                    "meta": created.meta,
                }
            ),
            flush=True,
        )
        statuses = [s.status async for s in session.experimental.poll_task(task.taskId)]
        result = await session.experimental.get_task_result(task.taskId, CallToolResult)
        print(
            json.dumps(
                {
                    "statuses": statuses,
                    "result": result.model_dump(mode="json", by_alias=True, exclude_none=True),
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    try:
        asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])))
    except httpx.HTTPError as error:
        sys.exit(f"HTTP error: {error!r}")
