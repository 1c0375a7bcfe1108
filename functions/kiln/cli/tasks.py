"""`kiln tasks ls | get | result | cancel`: the key's MCP tasks, over the server's routes.

A task belongs to the key that started it (`kiln tools call NAME --task`, or any MCP client
with the same key), so these commands see that key's tasks only. `ls` asks `/mcp` for
`tasks/list` (MCP 2025-11-25: REST has no list); `get`, `result` and `cancel` use
`GET /api/tasks/ID` and `POST /api/tasks/ID/cancel`. `result` waits for the end (polling at
the task's `pollIntervalMs`, for at most `--wait` seconds), prints the result's content like
`kiln tools call` does, and exits 1 when the tool failed, the task failed or was cancelled,
waits for answers, or is still running when the wait is over.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from kiln.cli import output

if TYPE_CHECKING:
    from kiln.cli.client import KilnClient

TASKS_VERSION = "2025-11-25"  # the MCP revision whose core has tasks/list
ENDED = ("completed", "failed", "cancelled")


class TaskIdParser(argparse.ArgumentParser):
    """Task ids are URL-safe base64 and may start with `-`: a word that is none of this
    command's options is an id, not an unknown option (`kiln tasks get -q0x…` works)."""

    def _parse_optional(self, arg_string: str) -> Any:
        if arg_string.split("=", 1)[0] not in self._option_string_actions:
            return None
        return super()._parse_optional(arg_string)


def _task_path(task_id: str) -> str:
    return f"/api/tasks/{quote(task_id, safe='')}"


def _mcp(client: KilnClient, method: str, params: dict[str, Any]) -> dict[str, Any]:
    """One MCP request to the server's /mcp (built by the official models, as a client's);
    a JSON-RPC error raises ApiCallError."""
    import mcp_types

    from kiln.cli.client import ApiCallError

    headers = {"Accept": "application/json, text/event-stream",
               "MCP-Protocol-Version": TASKS_VERSION}  # fmt: skip
    request = mcp_types.JSONRPCRequest(
        jsonrpc=mcp_types.JSONRPC_VERSION, id=1, method=method, params=params
    )
    body = request.model_dump(mode="json", by_alias=True, exclude_none=True)
    answer, _ = client.request("POST", "/mcp", body, headers=headers)
    if not isinstance(answer, dict) or "result" not in answer:
        error = answer.get("error", {}) if isinstance(answer, dict) else {}
        raise ApiCallError(0, f"{method}: {error.get('message', answer)}")
    return dict(answer["result"])


@output.talks("tasks ls")
def cmd_ls(args: argparse.Namespace) -> int:
    tasks: list[dict[str, Any]] = []
    client = output.client(args)
    params: dict[str, Any] = {}
    while True:
        page = _mcp(client, "tasks/list", params)
        tasks.extend(page.get("tasks", []))
        if not page.get("nextCursor"):
            break
        params = {"cursor": page["nextCursor"]}
    return output.listing(tasks, _task_line, as_json=args.json, empty="no tasks")


def _task_line(task: dict[str, Any]) -> str:
    return (
        f"{task['taskId']:44} {task['status']:15} {task.get('createdAt', '-'):24} "
        f"{task.get('statusMessage') or ''}"
    )


@output.talks("tasks get")
def cmd_get(args: argparse.Namespace) -> int:
    task, _ = output.client(args).request("GET", _task_path(args.id))
    print(json.dumps(task, indent=2))
    return 0


def _content_text(result: dict[str, Any]) -> str:
    """What `kiln tools call` would print for this CallToolResult: its text, else its JSON."""
    parts = [
        item["text"] if item.get("type") == "text" else json.dumps(item)
        for item in result.get("content", [])
    ]
    if not parts and result.get("structuredContent") is not None:
        parts.append(json.dumps(result["structuredContent"]))
    return "\n".join(parts)


def _not_done(task: dict[str, Any]) -> str | None:
    """Why an ended or waiting task has no result to print, or None when it has one."""
    status, task_id = task["status"], task["taskId"]
    if status == "completed":
        return None
    if status == "failed":
        error = task.get("error") or {}
        return f"task {task_id} failed: {error.get('message', 'no error was recorded')}"
    if status == "cancelled":
        return f"task {task_id} was cancelled"
    if status == "input_required":
        return (
            f"task {task_id} waits for answers to its questions; answer them over MCP "
            "(tasks/update, or tasks/get to see them)"
        )
    said = f" ({task['statusMessage']})" if task.get("statusMessage") else ""
    return f"task {task_id} is still {status}{said}; run `kiln tasks result {task_id}` again later"


@output.talks("tasks result")
def cmd_result(args: argparse.Namespace) -> int:
    deadline = time.monotonic() + max(0.0, args.wait)
    client = output.client(args)
    while True:
        task, _ = client.request("GET", _task_path(args.id))
        waiting = task["status"] not in (*ENDED, "input_required")
        if not waiting or time.monotonic() >= deadline:
            break
        pause = (task.get("pollIntervalMs") or 1000) / 1000
        time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
    problem = _not_done(task)
    if problem is not None:
        return output.fail("tasks result", problem)
    result = task.get("mcp_result") or {}
    print(_content_text(result))
    return 1 if result.get("isError") else 0


@output.talks("tasks cancel")
def cmd_cancel(args: argparse.Namespace) -> int:
    task, _ = output.client(args).request("POST", f"{_task_path(args.id)}/cancel")
    print(f"{task['taskId']} {task['status']}")
    return 0


def register(commands: Any, server_options: Any) -> None:
    """Add `tasks` and its subcommands to the `kiln` parser."""
    tasks = commands.add_parser("tasks", help="MCP tasks of your key: ls, get, result, cancel")
    sub = tasks.add_subparsers(dest="tasks_command", required=True, parser_class=TaskIdParser)
    output.subcommand(sub, "ls", cmd_ls, "list your key's tasks", json=True, options=server_options)
    output.subcommand(
        sub, "get", cmd_get, "a task's status (and result once ended)", "id", options=server_options
    )
    result = output.subcommand(
        sub, "result", cmd_result, "wait for a task's end, print it", "id", options=server_options
    )
    result.add_argument(
        "--wait", type=float, default=300.0, metavar="S", help="wait at most S seconds (300)"
    )
    output.subcommand(
        sub, "cancel", cmd_cancel, "stop a task and its run", "id", options=server_options
    )
