"""Tasks on both wires, pinned from the outside with an in-memory task backend."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from kiln.protocol import CallContext, McpEndpoint, ProtocolSettings, ToolView
from kiln.protocol.backend import TaskCursorError, TaskRecord, TaskRefusedError
from support.protocol import Client, FakeBackend, add_vat, add_vat_tool, body, meta, printing

EXT = "io.modelcontextprotocol/tasks"
SLOW = ToolView(
    name="slow",
    description="A long job.",
    input_schema={"type": "object", "properties": {"n": {"type": "integer"}}},
    task_support="optional",
)
ONLY_TASK = replace(SLOW, name="only_task", task_support="required")


@dataclass
class MemoryTasks:
    """Tasks held in memory, keyed by (owner, id); the test decides when each one ends."""

    records: dict[tuple[Any, str], TaskRecord] = field(default_factory=dict)
    created: list[tuple[str, dict[str, Any], str, int | None]] = field(default_factory=list)
    refuse: str | None = None

    async def create_task(
        self,
        tool: ToolView,
        arguments: Mapping[str, Any],
        ctx: CallContext,
        *,
        version: str,
        ttl_ms: int | None,
        answers: Mapping[str, Any] | None = None,
    ) -> TaskRecord:
        if self.refuse is not None:
            raise TaskRefusedError(self.refuse)
        task_id = f"task-{len(self.created) + 1}"
        self.created.append((tool.name, dict(arguments), version, ttl_ms))
        record = TaskRecord(task_id, "working", "2026-11-30T00:00:00Z", "2026-11-30T00:00:00Z",
                            ttl_ms or 3_600_000, 500)  # fmt: skip
        self.records[(ctx.principal, task_id)] = record
        return record

    def end(self, task_id: str, **fields: Any) -> None:
        for key, record in self.records.items():
            if key[1] == task_id:
                self.records[key] = replace(record, **fields)

    async def get_task(self, task_id: str, ctx: CallContext) -> TaskRecord | None:
        return self.records.get((ctx.principal, task_id))

    async def cancel_task(self, task_id: str, ctx: CallContext) -> TaskRecord | None:
        record = self.records.get((ctx.principal, task_id))
        if record is not None and not record.terminal:
            record = replace(record, status="cancelled")
            self.records[(ctx.principal, task_id)] = record
        return record

    async def list_tasks(
        self, ctx: CallContext, cursor: str | None
    ) -> tuple[Sequence[TaskRecord], str | None]:
        if cursor is not None:
            raise TaskCursorError(cursor)
        return [r for (owner, _), r in self.records.items() if owner == ctx.principal], None


@pytest.fixture
def tasks() -> MemoryTasks:
    return MemoryTasks()


@pytest.fixture
def client(backend: FakeBackend, settings: ProtocolSettings, tasks: MemoryTasks) -> Client:
    backend.add(SLOW, printing("slow done"))
    backend.add(ONLY_TASK, printing("only done"))
    backend.add(replace(add_vat_tool(), name="plain"), add_vat)
    settings = replace(settings, task_result_wait_s=0.3)
    return Client(McpEndpoint(backend, settings, tasks=tasks))


def with_ext(params: dict[str, Any]) -> dict[str, Any]:
    return {**params, "_meta": meta(**{"io.modelcontextprotocol/clientCapabilities": {
        "extensions": {EXT: {}}}})}  # fmt: skip


def modern_call(client: Client, name: str, *, ext: bool = True) -> Any:
    params = {"name": name, "arguments": {"n": 1}}
    return body(client.modern("tools/call", with_ext(params) if ext else params))


def modern(client: Client, method: str, task_id: str, *, ext: bool = True) -> Any:
    params = {"taskId": task_id}
    return body(client.modern(method, with_ext(params) if ext else params, name=task_id))


def test_discover_advertises_the_tasks_extension_and_no_v1_tasks_slot(client: Client) -> None:
    capabilities = body(client.modern("server/discover"))["result"]["capabilities"]
    assert capabilities["extensions"] == {EXT: {}}
    assert "tasks" not in capabilities


def test_a_task_tool_with_the_extension_answers_a_flat_create_task_result(
    client: Client, tasks: MemoryTasks
) -> None:
    result = modern_call(client, "slow")["result"]
    assert result["resultType"] == "task"
    assert {"taskId", "status", "createdAt", "lastUpdatedAt", "ttlMs", "pollIntervalMs"} <= set(
        result
    )
    assert not {"task", "ttl", "pollInterval", "result", "requestState"} & set(result)
    assert tasks.created == [("slow", {"n": 1}, "2026-07-28", None)]


def test_without_the_extension_an_optional_tool_runs_and_a_required_one_is_refused(
    client: Client,
) -> None:
    ran = modern_call(client, "slow", ext=False)["result"]
    assert ran["resultType"] == "complete"
    assert ran["content"][0]["text"] == "slow done"
    response = client.modern("tools/call", {"name": "only_task", "arguments": {}})
    assert response.status == 400
    error = body(response)["error"]
    assert error["code"] == -32021
    assert error["data"] == {"requiredCapabilities": {"extensions": {EXT: {}}}}


def test_arguments_are_checked_before_a_task_is_created(client: Client, tasks: MemoryTasks) -> None:
    params = with_ext({"name": "slow", "arguments": {"n": "one"}})
    result = body(client.modern("tools/call", params))["result"]
    assert result["isError"] is True
    assert tasks.created == []


def test_tasks_get_inlines_the_result_or_the_error_once_the_task_has_ended(
    client: Client, tasks: MemoryTasks
) -> None:
    first = modern_call(client, "slow")["result"]["taskId"]
    assert "result" not in modern(client, "tasks/get", first)["result"]
    outcome = {"content": [{"type": "text", "text": "x"}], "isError": True}
    tasks.end(first, status="completed", result=outcome)
    got = modern(client, "tasks/get", first)["result"]
    assert got["status"] == "completed"
    assert got["result"] == outcome
    assert got["resultType"] == "complete"
    second = modern_call(client, "slow")["result"]["taskId"]
    tasks.end(second, status="failed", error={"code": -32603, "message": "boom"})
    failed = modern(client, "tasks/get", second)["result"]
    assert failed["error"] == {"code": -32603, "message": "boom"}
    assert "result" not in failed


def test_task_methods_need_the_extension_and_an_id_the_caller_owns(client: Client) -> None:
    for method in ("tasks/get", "tasks/update", "tasks/cancel"):
        assert modern(client, method, "task-1", ext=False)["error"]["code"] == -32021
    assert modern(client, "tasks/get", "task-99")["error"]["code"] == -32602
    task_id = modern_call(client, "slow")["result"]["taskId"]
    other = Client(client.endpoint, principal="someone-else")
    assert modern(other, "tasks/get", task_id)["error"]["code"] == -32602
    assert modern(other, "tasks/cancel", task_id)["error"]["code"] == -32602


def test_task_methods_check_mcp_name_against_the_task_id(client: Client) -> None:
    response = client.modern("tasks/get", with_ext({"taskId": "task-1"}), name="task-2")
    assert response.status == 400
    assert body(response)["error"]["code"] == -32020


def test_cancel_and_update_answer_an_empty_ack_even_for_an_ended_task(
    client: Client, tasks: MemoryTasks
) -> None:
    task_id = modern_call(client, "slow")["result"]["taskId"]
    for method in ("tasks/update", "tasks/cancel", "tasks/cancel"):
        ack = modern(client, method, task_id)["result"]
        assert ack["resultType"] == "complete"
        assert not {"taskId", "status"} & set(ack)
    assert modern(client, "tasks/get", task_id)["result"]["status"] == "cancelled"


def test_the_removed_v1_methods_are_not_found_on_2026(client: Client) -> None:
    for method in ("tasks/result", "tasks/list"):
        response = client.modern(method, with_ext({"taskId": "x"}))
        assert response.status == 404
        assert body(response)["error"]["code"] == -32601


def test_a_refused_task_is_a_tool_error_that_says_why(client: Client, tasks: MemoryTasks) -> None:
    tasks.refuse = "Too many running tasks"
    result = modern_call(client, "slow")["result"]
    assert result["isError"] is True
    assert result["content"][0]["text"] == "Too many running tasks"


def test_2025_11_25_initialize_and_tools_list_show_task_support(client: Client) -> None:
    init = body(client.legacy("initialize", {"protocolVersion": "2025-11-25"}))["result"]
    assert init["capabilities"]["tasks"] == {
        "list": {},
        "cancel": {},
        "requests": {"tools": {"call": {}}},
    }
    old = body(client.legacy("initialize", {"protocolVersion": "2025-06-18"}))["result"]
    assert "tasks" not in old["capabilities"]
    tools = {t["name"]: t for t in body(client.legacy("tools/list"))["result"]["tools"]}
    assert tools["slow"]["execution"] == {"taskSupport": "optional"}
    assert "execution" not in tools["plain"]


def test_2025_11_25_task_flow_create_get_result_list_and_cancel_rules(
    client: Client, tasks: MemoryTasks
) -> None:
    created = body(
        client.legacy("tools/call", {"name": "slow", "arguments": {}, "task": {"ttl": 60000}})
    )["result"]["task"]
    assert created["status"] == "working"
    assert created["ttl"] == 60000
    task_id = created["taskId"]
    waited = body(client.legacy("tasks/result", {"taskId": task_id}))["error"]
    assert waited["code"] == -32603
    assert "still working" in waited["message"]
    outcome = {"content": [{"type": "text", "text": "x"}], "isError": True}
    tasks.end(task_id, status="completed", result=outcome)
    got = body(client.legacy("tasks/get", {"taskId": task_id}))["result"]
    assert got["status"] == "failed"  # 2025-11-25: an isError result fails the task
    result = body(client.legacy("tasks/result", {"taskId": task_id}))["result"]
    assert result["isError"] is True
    assert result["_meta"]["io.modelcontextprotocol/related-task"] == {"taskId": task_id}
    listed = body(client.legacy("tasks/list"))["result"]["tasks"]
    assert [t["taskId"] for t in listed] == [task_id]
    assert body(client.legacy("tasks/list", {"cursor": "nope"}))["error"]["code"] == -32602
    refused = body(client.legacy("tasks/cancel", {"taskId": task_id}))["error"]
    assert refused["code"] == -32602
    assert "terminal" in refused["message"]


def test_2025_11_25_a_failed_task_replays_its_error_on_tasks_result(
    client: Client, tasks: MemoryTasks
) -> None:
    params = {"name": "slow", "arguments": {}, "task": {}}
    task_id = body(client.legacy("tools/call", params))["result"]["task"]["taskId"]
    tasks.end(task_id, status="failed", error={"code": -32603, "message": "Tool 'slow' failed"})
    error = body(client.legacy("tasks/result", {"taskId": task_id}))["error"]
    assert error == {"code": -32603, "message": "Tool 'slow' failed"}


def test_2025_11_25_task_support_decides_between_task_and_plain_calls(client: Client) -> None:
    required = body(client.legacy("tools/call", {"name": "only_task", "arguments": {}}))
    assert required["error"]["code"] == -32601
    forbidden = body(
        client.legacy("tools/call", {"name": "plain", "arguments": {"net": 1}, "task": {}})
    )
    assert forbidden["error"]["code"] == -32601
    bad = body(client.legacy("tools/call", {"name": "slow", "arguments": {}, "task": 5}))
    assert bad["error"]["code"] == -32602
    older = body(
        client.legacy(
            "tools/call", {"name": "slow", "arguments": {}, "task": {}}, version="2025-06-18"
        )
    )["result"]
    assert older["content"][0]["text"] == "slow done"  # revisions before tasks ignore the param
    assert (
        body(client.legacy("tasks/get", {"taskId": "x"}, version="2025-06-18"))["error"]["code"]
        == -32601
    )


def test_a_tool_that_prints_kiln_error_ends_its_call_in_a_json_rpc_error(
    backend: FakeBackend, settings: ProtocolSettings
) -> None:
    backend.add(
        replace(add_vat_tool(), name="broken"), printing('{"kiln/error": {"message": "no"}}')
    )
    plain = Client(McpEndpoint(backend, settings))
    error = body(plain.legacy("tools/call", {"name": "broken", "arguments": {"net": 1}}))["error"]
    assert error == {"code": -32603, "message": "Tool 'broken' failed: no"}
    backend.add(replace(add_vat_tool(), name="odd"), printing('{"kiln/error": "no"}'))
    odd = body(plain.legacy("tools/call", {"name": "odd", "arguments": {"net": 1}}))["error"]
    assert "is not valid" in odd["message"]
