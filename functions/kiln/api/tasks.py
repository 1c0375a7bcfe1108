"""REST: authors' long runs as MCP tasks.

`POST /api/tools/{ref}/run` with `"task": true` starts one (see `kiln.api.tools`) and answers
202 with the task and where to poll it; `GET /api/tasks/{id}` reads it (with the
CallToolResult once it has ended); `POST /api/tasks/{id}/cancel` stops it. A task belongs to
the author key that started it, exactly as over MCP, where the same key can poll it too.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from kiln.api.common import kiln_of, require
from kiln.api.errors import ApiError
from kiln.catalog.model import Tool
from kiln.protocol.backend import Arrival, CallContext, TaskRecord, TaskRefusedError
from kiln.protocol.calling import ToolCaller
from kiln.protocol.tasks import modern_task
from kiln.protocol.wire import LATEST_LEGACY
from kiln.serving.resolved import tool_view

router = APIRouter(prefix="/api/tasks", tags=["tasks"])


def task_json(record: TaskRecord) -> dict[str, Any]:
    """The task, its result (`mcp_result`) or error once ended, and where to poll it."""
    body = modern_task(record)
    body["poll"] = f"/api/tasks/{record.task_id}"
    if record.result is not None:
        body["mcp_result"] = dict(record.result)
    if record.error is not None:
        body["error"] = dict(record.error)
    return body


def _found(record: TaskRecord | None) -> dict[str, Any]:
    """The caller's task as `task_json` says it; 404 when the caller has none with that id."""
    if record is None:
        raise ApiError(
            404, "not_found", "no task with this id (unknown, expired, or started by another key)"
        )
    return task_json(record)


async def start(request: Request, tool: Tool, arguments: Any, principal: Any) -> JSONResponse:
    """Start `tool` as a task for this author; 202 with the task, or a refusal saying why."""
    kiln = kiln_of(request)
    view = tool_view(tool)
    if view.task_support is None:
        raise ApiError(
            422,
            "not_a_task_tool",
            f'tool {tool.name!r} does not run as a task: set "task": "optional" in its '
            'manifest, or run it without "task"',
        )
    checked = await ToolCaller(kiln.backend).check_arguments(view, arguments)
    if isinstance(checked, dict):
        raise ApiError(422, "invalid_arguments", checked["content"][0]["text"])
    ctx = CallContext(principal=principal, arrival=Arrival(author_run=True))  # not a tools/call
    try:
        record = await kiln.tasks.create_task(
            view, checked[1], ctx, version=LATEST_LEGACY, ttl_ms=None
        )
    except TaskRefusedError as refusal:
        raise ApiError(429, "task_refused", str(refusal)) from None
    body = task_json(record)
    return JSONResponse(body, status_code=202, headers={"Location": body["poll"]})


@router.get("/{task_id}")
async def get_task(task_id: str, request: Request) -> dict[str, Any]:
    who = await require(request)
    return _found(await kiln_of(request).tasks.get_task(task_id, CallContext(principal=who)))


@router.post("/{task_id}/cancel")
async def cancel_task(task_id: str, request: Request) -> dict[str, Any]:
    who = await require(request)
    return _found(await kiln_of(request).tasks.cancel_task(task_id, CallContext(principal=who)))
