"""Long-running tool calls as tasks, on both wires; the records live behind a `TaskBackend`.

- 2025-11-25 (experimental core tasks): a tool lists `execution.taskSupport`; the client asks
  for a task with `params.task` on `tools/call` and gets `{"task": Task}`; `tasks/get`,
  `tasks/result` (waits for the end, within the request's time), `tasks/list` and
  `tasks/cancel` (-32602 on a terminal task) follow that revision. A tool error there makes
  the task `failed` (its `tasks/result` is still the `isError` result).
- 2026-07-28 (the `io.modelcontextprotocol/tasks` extension, SEP-2663): the server decides.
  A client that lists the extension in its request's client capabilities gets a flat
  `CreateTaskResult` (`resultType: "task"`) for every task-supporting tool; without it an
  `optional` tool runs inside the request and a `required` one gets -32021. `tasks/get`
  inlines the result once terminal (`completed`, with `isError` for a tool error; `failed`
  with the JSON-RPC error), `tasks/cancel` and `tasks/update` answer an empty ack, and
  `tasks/result` / `tasks/list` do not exist (-32601).

Unknown, expired and other callers' ids all get the same -32602.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from kiln.protocol.backend import (
    CallContext,
    TaskAnswerError,
    TaskBackend,
    TaskCursorError,
    TaskRecord,
    TaskRefusedError,
    ToolView,
)
from kiln.protocol.calling import ToolCaller, tool_error
from kiln.protocol.classify import Envelope
from kiln.protocol.errors import (
    InternalError,
    InvalidParamsError,
    MethodNotFoundError,
    MissingCapabilityError,
    ProtocolError,
    RequestId,
    error_data,
)
from kiln.protocol.spec import CLIENT_CAPABILITIES_META_KEY, INTERNAL_ERROR

if TYPE_CHECKING:
    from mcp_types import Task

    from kiln.protocol.talking import GoingOn

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
TASKS_VERSION = "2025-11-25"  # the one legacy revision with core tasks
RELATED_TASK_META_KEY = "io.modelcontextprotocol/related-task"
MAX_TASK_ID = 256
Finish = Callable[[dict[str, Any]], dict[str, Any]]


class ReplayedError(ProtocolError):
    """A task's recorded JSON-RPC error, answered again by 2025-11-25 `tasks/result`."""

    def __init__(self, error: dict[str, Any], *, request_id: RequestId) -> None:
        super().__init__(
            str(error.get("message", "Internal error")),
            request_id=request_id,
            data=error.get("data"),
        )
        code = error.get("code")
        self.code = code if isinstance(code, int) else -32603


def extension_negotiated(params: dict[str, Any]) -> bool:
    """Whether this 2026-07-28 request lists the tasks extension in its client capabilities."""
    meta = params.get("_meta")
    caps = meta.get(CLIENT_CAPABILITIES_META_KEY) if isinstance(meta, dict) else None
    extensions = caps.get("extensions") if isinstance(caps, dict) else None
    return isinstance(extensions, dict) and TASKS_EXTENSION in extensions


def task_client(envelope: Envelope) -> bool:
    """Whether this tools/call's client takes a task as its answer."""
    if envelope.modern:
        return extension_negotiated(envelope.params)
    return envelope.version == TASKS_VERSION and isinstance(envelope.params.get("task"), dict)


def _not_found(request_id: RequestId) -> InvalidParamsError:
    return InvalidParamsError(
        "Invalid params: no task with this taskId (it is unknown, has expired, or belongs to "
        "another caller)",
        request_id=request_id,
    )


def _task_id(envelope: Envelope) -> str:
    task_id = envelope.params.get("taskId")
    if not isinstance(task_id, str) or not 0 < len(task_id) <= MAX_TASK_ID:
        raise InvalidParamsError(
            f"Invalid params: {envelope.method} needs params.taskId as a string of 1 to "
            f"{MAX_TASK_ID} characters",
            request_id=envelope.request_id,
        )
    return task_id


def _legacy_status(record: TaskRecord) -> str:
    # 2025-11-25: "for tool calls, `failed` includes results with isError true".
    if record.status == "completed" and record.result and record.result.get("isError"):
        return "failed"
    return record.status


def _legacy_task(record: TaskRecord) -> Task:
    from mcp_types import Task  # the models load with the first task, not at a cold start

    message = record.status_message
    if message is None and record.error is not None:
        message = str(record.error.get("message", ""))
    return Task(
        task_id=record.task_id,
        status=_legacy_status(record),  # type: ignore[arg-type]
        status_message=message,
        created_at=record.created_at,
        last_updated_at=record.last_updated_at,
        ttl=record.ttl_ms,
        poll_interval=record.poll_interval_ms,
    )


def _dump(model: Any) -> dict[str, Any]:
    dumped: dict[str, Any] = model.model_dump(by_alias=True, exclude_none=True, mode="json")
    return dumped


def modern_task(record: TaskRecord) -> dict[str, Any]:
    """The SEP-2663 `Task` fields (also the body of a `CreateTaskResult`)."""
    task: dict[str, Any] = {
        "taskId": record.task_id,
        "status": record.status,
        "createdAt": record.created_at,
        "lastUpdatedAt": record.last_updated_at,
        "ttlMs": record.ttl_ms,
    }
    if record.poll_interval_ms is not None:
        task["pollIntervalMs"] = record.poll_interval_ms
    if record.status_message is not None:
        task["statusMessage"] = record.status_message
    if record.meta:
        task["_meta"] = dict(record.meta)
    return task


def detailed_task(record: TaskRecord) -> dict[str, Any]:
    """`tasks/get` on 2026-07-28: the task with its result or error inlined once terminal."""
    task = modern_task(record)
    if record.status == "completed" and record.result is not None:
        task["result"] = dict(record.result)
    elif record.status == "failed":
        task["error"] = dict(record.error or error_data(INTERNAL_ERROR, "Internal error"))
    elif record.status == "input_required" and record.input_requests:
        task["inputRequests"] = dict(record.input_requests)
    return task


async def _claim(ctx: CallContext, tool: ToolView) -> None:
    """Claim a keyed call's key before its task is made (kiln.protocol.idempotency)."""
    if ctx.once is not None:
        await ctx.once.claim(tool)


def _ran(ctx: CallContext) -> None:
    """The keyed call's task was made (or its run answered): its answer is kept."""
    if ctx.once is not None:
        ctx.once.ran = True


class TaskMethods:
    """tools/call routing plus the tasks/* methods of both eras."""

    def __init__(
        self, backend: TaskBackend, caller: ToolCaller, *, result_wait_s: float = 20.0
    ) -> None:
        self._backend = backend
        self._caller = caller
        self._result_wait_s = result_wait_s

    async def tools_call(self, envelope: Envelope, ctx: CallContext) -> dict[str, Any]:
        """A tools/call: run inside the request, or create a task, as tool and client say."""
        from mcp_types import CreateTaskResult

        from kiln.protocol.talking import GoingOn  # a call's turn: the first call loads it

        rid = envelope.request_id
        tool = await self._caller.find(envelope.params, ctx=ctx, request_id=rid)
        waits = bool(tool.waits_for)  # a person must approve it first: always a task
        as_task = task_client(envelope) if waits else self._wants_task(tool, envelope)
        arguments = envelope.params.get("arguments", {})
        checked = await self._caller.check_arguments(tool, arguments, ctx=ctx)
        if isinstance(checked, dict):
            return checked
        _, arguments = checked
        if not as_task and not waits:
            return await self._caller.run(
                tool, arguments, version=envelope.version, ctx=ctx, request_id=rid
            )
        await _claim(ctx, tool)  # a keyed call: its key names this task (idempotency.py)
        answers = None
        if tool.asks_first and envelope.modern and not waits:
            first = await self._ask_first(tool, arguments, envelope, ctx)
            if not isinstance(first, GoingOn):
                _ran(ctx)  # (a question is not kept: idempotency.py)
                return first
            answers = first.answers
        try:
            record = await self._backend.create_task(
                tool,
                arguments,
                ctx,
                version=envelope.version,
                ttl_ms=self._requested_ttl(envelope),
                answers=answers,
                **({"again": not as_task} if waits else {}),  # said only of a waiting call
            )
        except TaskRefusedError as refusal:
            return tool_error(str(refusal))
        except ProtocolError as error:  # a refusal the backend decided (a spent quota)
            error.request_id = rid
            raise
        if not as_task:  # a key is not kept for a pending call: the same call again asks
            return self._waited(tool, record, rid)
        _ran(ctx)
        meta = {"_meta": dict(record.meta)} if record.meta else {}
        if envelope.modern:
            return {**modern_task(record), "resultType": "task"}
        return {**_dump(CreateTaskResult(task=_legacy_task(record))), **meta}

    @staticmethod
    def _waited(tool: ToolView, record: TaskRecord, rid: RequestId) -> dict[str, Any]:
        """A call that waits for a person's approval, made by a client without tasks: its
        result once the task has ended, else an `isError` result saying it is pending (the
        same call again, with the same arguments, finds the same approval)."""
        if record.status == "completed" and record.result is not None:
            return dict(record.result)
        if record.status == "failed":
            raise ReplayedError(
                dict(record.error or error_data(INTERNAL_ERROR, "Internal error")), request_id=rid
            )
        if record.status == "cancelled":
            return tool_error(f"Tool {tool.name!r} was not run: its call was cancelled.")
        said = tool_error(
            f"{record.status_message} Call {tool.name} again with the same arguments to get "
            f"its result once it is approved (or, with the same key, GET /api/tasks/"
            f"{record.task_id})."
        )
        return {**said, "_meta": dict(record.meta)} if record.meta else said

    async def _ask_first(
        self, tool: ToolView, arguments: dict[str, Any], envelope: Envelope, ctx: CallContext
    ) -> dict[str, Any] | GoingOn:
        """A tool that asks first runs inside the request until it has every answer (rounds
        of input_required, SEP-2322) and says it goes on as a task; then the task starts
        with those answers (SEP-2663's MRTR-then-task composition)."""
        from kiln.protocol.talking import GoingOn

        rid = envelope.request_id
        assert ctx.turn is not None  # set by the dispatcher for every tools/call
        turn = replace(ctx.turn, can_task=True)
        ctx = replace(ctx, turn=turn)
        try:
            said = await turn.converse(
                lambda c: self._caller.outcome(tool, arguments, c), tool, arguments, ctx, rid
            )
        except ProtocolError as error:
            error.request_id = rid
            raise
        if isinstance(said, (dict, GoingOn)):
            return said
        return self._caller.shape(tool, said, envelope.version)  # it finished right away

    def _wants_task(self, tool: ToolView, envelope: Envelope) -> bool:
        params, rid = envelope.params, envelope.request_id
        if envelope.modern:
            if tool.task_support is None:
                return False  # a v1 `task` hint on a plain tool is ignored
            if extension_negotiated(params):
                return True
            if tool.task_support == "optional":
                return False
            raise MissingCapabilityError(
                f"Missing required client capability: tool '{tool.name}' runs only as a task; "
                f"declare the '{TASKS_EXTENSION}' extension in the request's client capabilities",
                request_id=rid,
                data={"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}},
                modern=True,
            )
        asked = envelope.version == TASKS_VERSION and "task" in params
        if asked and not isinstance(params["task"], dict):
            raise InvalidParamsError(
                'Invalid params: params.task must be an object such as {"ttl": 60000}',
                request_id=rid,
            )
        if asked and tool.task_support is None:
            raise MethodNotFoundError(
                f"Method not found: tool '{tool.name}' does not run as a task "
                "(its execution.taskSupport is forbidden); call it without params.task",
                request_id=rid,
            )
        if not asked and tool.task_support == "required":
            raise MethodNotFoundError(
                f"Method not found: tool '{tool.name}' runs only as a task: call it with "
                f"params.task on MCP {TASKS_VERSION}, or on 2026-07-28 with the "
                f"'{TASKS_EXTENSION}' extension",
                request_id=rid,
            )
        return asked

    @staticmethod
    def _requested_ttl(envelope: Envelope) -> int | None:
        task = envelope.params.get("task")
        ttl = task.get("ttl") if isinstance(task, dict) else None
        if ttl is None or envelope.modern:
            return None
        if not isinstance(ttl, int) or isinstance(ttl, bool) or ttl <= 0:
            raise InvalidParamsError(
                "Invalid params: params.task.ttl must be a positive integer of milliseconds",
                request_id=envelope.request_id,
            )
        return ttl

    # ------------------------------------------------------------------ shared steps

    def _gate(self, envelope: Envelope) -> None:
        if envelope.modern and not extension_negotiated(envelope.params):
            raise MissingCapabilityError(
                f"Missing required client capability: {envelope.method} needs the "
                f"'{TASKS_EXTENSION}' extension in the request's client capabilities",
                request_id=envelope.request_id,
                data={"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}},
                modern=True,
            )

    async def _find(self, envelope: Envelope, ctx: CallContext) -> TaskRecord:
        self._gate(envelope)
        task_id = _task_id(envelope)
        record: TaskRecord | None = await self._call(self._backend.get_task(task_id, ctx), envelope)
        if record is None:
            raise _not_found(envelope.request_id)
        return record

    @staticmethod
    async def _call(awaitable: Any, envelope: Envelope) -> Any:
        try:
            return await awaitable
        except (ProtocolError, TaskCursorError, TaskAnswerError):
            raise
        except Exception as exc:
            raise InternalError("Internal error", request_id=envelope.request_id) from exc

    # ------------------------------------------------------------------ methods

    async def get(self, envelope: Envelope, ctx: CallContext) -> dict[str, Any]:
        from mcp_types import GetTaskResult

        record = await self._find(envelope, ctx)
        if envelope.modern:
            return detailed_task(record)
        meta = {"_meta": dict(record.meta)} if record.meta else {}
        return {**_dump(GetTaskResult.model_validate(_dump(_legacy_task(record)))), **meta}

    async def update(self, envelope: Envelope, ctx: CallContext) -> dict[str, Any]:
        """Answers for a task's open questions; responses for keys that are not open are
        ignored, as SEP-2663 says. An empty ack: the task's state shows on tasks/get."""
        record = await self._find(envelope, ctx)
        responses = envelope.params.get("inputResponses", {})
        if not isinstance(responses, dict):
            raise InvalidParamsError(
                "Invalid params: inputResponses must be an object (question key -> answer)",
                request_id=envelope.request_id,
            )
        if record.status != "input_required":
            return {}
        try:
            await self._call(self._backend.update_task(record.task_id, responses, ctx), envelope)
        except TaskAnswerError as error:
            raise InvalidParamsError(
                f"Invalid params: {error}", request_id=envelope.request_id
            ) from None
        return {}

    async def cancel(self, envelope: Envelope, ctx: CallContext) -> dict[str, Any]:
        from mcp_types import CancelTaskResult

        record = await self._find(envelope, ctx)
        if envelope.modern:
            if not record.terminal:
                await self._call(self._backend.cancel_task(record.task_id, ctx), envelope)
            return {}  # an ack, also for a task that had already ended
        if record.terminal:
            raise InvalidParamsError(
                f"Invalid params: cannot cancel task: already in terminal status "
                f"'{_legacy_status(record)}'",
                request_id=envelope.request_id,
            )
        after = await self._call(self._backend.cancel_task(record.task_id, ctx), envelope)
        if after is None:
            raise _not_found(envelope.request_id)
        if after.status != "cancelled":
            raise InvalidParamsError(
                f"Invalid params: cannot cancel task: it ended first, as '{_legacy_status(after)}'",
                request_id=envelope.request_id,
            )
        return _dump(CancelTaskResult.model_validate(_dump(_legacy_task(after))))

    async def result(self, envelope: Envelope, ctx: CallContext) -> dict[str, Any]:
        """2025-11-25 `tasks/result`: waits for the end, within the time the request has."""
        record = await self._find(envelope, ctx)
        budget = self._result_wait_s
        if ctx.time_left_s is not None:
            budget = min(budget, ctx.time_left_s - 2.0)
        deadline = time.monotonic() + budget
        while not record.terminal and time.monotonic() < deadline:
            await asyncio.sleep(min(0.25, max(0.0, deadline - time.monotonic())))
            record = await self._find(envelope, ctx)
        if not record.terminal:
            raise InternalError(
                f"Internal error: the task is still {record.status} after {budget:.0f} s, "
                "longer than this request may wait; poll tasks/get and ask again once it ends",
                request_id=envelope.request_id,
            )
        related = {RELATED_TASK_META_KEY: {"taskId": record.task_id}}
        if record.status == "completed" and record.result is not None:
            result = dict(record.result)
            result["_meta"] = {**result.get("_meta", {}), **related}
            return result
        if record.status == "cancelled":
            raise InvalidParamsError(
                "Invalid params: the task was cancelled, so it has no result",
                request_id=envelope.request_id,
            )
        raise ReplayedError(
            dict(record.error or error_data(INTERNAL_ERROR, "Internal error")),
            request_id=envelope.request_id,
        )

    async def list(self, envelope: Envelope, ctx: CallContext) -> dict[str, Any]:
        from mcp_types import ListTasksResult

        cursor = envelope.params.get("cursor")
        if cursor is not None and not isinstance(cursor, str):
            raise InvalidParamsError(
                "Invalid params: params.cursor must be a string", request_id=envelope.request_id
            )
        try:
            records, next_cursor = await self._call(self._backend.list_tasks(ctx, cursor), envelope)
        except TaskCursorError as exc:
            raise InvalidParamsError(
                "Invalid params: this cursor was not issued by tasks/list",
                request_id=envelope.request_id,
            ) from exc
        return _dump(
            ListTasksResult(tasks=[_legacy_task(r) for r in records], next_cursor=next_cursor)
        )
