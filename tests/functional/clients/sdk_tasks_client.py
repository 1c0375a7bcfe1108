"""A 2025-11-25 task flow through the official Python SDK (mcp 1.x, `session.experimental`).

usage: python sdk_tasks_client.py URL TOOL ARGS_JSON
Prints one JSON line: the negotiated version, the created task, every polled status, and the
result. Runs in its own virtualenv (mcp 2.x dropped the experimental tasks client).
"""

import asyncio
import json
import sys

from mcp import ClientSession
from mcp.client.streamable_http import streamablehttp_client
from mcp.types import CallToolResult


async def main(url: str, tool: str, arguments: dict) -> dict:
    async with streamablehttp_client(url) as (read, write, _), ClientSession(read, write) as s:
        init = await s.initialize()
        created = await s.experimental.call_tool_as_task(tool, arguments, ttl=600_000)
        task_id = created.task.taskId
        statuses = [status.status async for status in s.experimental.poll_task(task_id)]
        result = await s.experimental.get_task_result(task_id, CallToolResult)
        return {
            "protocol": init.protocolVersion,
            "tasks_capability": init.capabilities.tasks is not None,
            "created": created.task.status,
            "task_id": task_id,
            "statuses": statuses,
            "result": result.model_dump(mode="json", by_alias=True, exclude_none=True),
        }


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1], sys.argv[2], json.loads(sys.argv[3])))))
