"""Long-running tools as MCP tasks, on both wires, against a real app with its local worker pool.

Real HTTP into the app, the moto server for DynamoDB and S3, real scripts in real processes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest

from kiln.tasks.settings import TaskSettings
from support.app import AUTHOR_KEY, META_CAPS, McpServer, meta, start_kiln, write_tool

EXT = "io.modelcontextprotocol/tasks"
TERMINAL = {"completed", "failed", "cancelled"}
FAST_LEASES = TaskSettings(heartbeat_s=0.2, lease_s=2.0, start_grace_s=5.0, poll_interval_ms=200)

# Writes its pid and a grandchild's pid, then sleeps: what a cancel must leave nothing of.
TREE = """
import json, os, subprocess, sys, time
args = json.load(sys.stdin)
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
with open(args["pids"], "w") as f:
    f.write(f"{os.getpid()} {child.pid}")
time.sleep(args["seconds"])
print("done")
"""
PRINTER = """
import json, sys
args = json.load(sys.stdin)
sys.stdout.write("x" * 1024 * args["kib"])
"""
# Reports step 1, then (once `go` exists) step 2 until `done` exists: a status message that
# changes while the task works.
STEPPER = """
import json, os, sys, time
args = json.load(sys.stdin)
talk = os.fdopen(int(os.environ["KILN_TALK_FD"]), "w", buffering=1)
def step(n):
    talk.write(json.dumps({"progress": n, "total": 2, "message": f"step {n}"}) + "\\n")
step(1)
while not os.path.exists(args["go"]):
    time.sleep(0.05)
while not os.path.exists(args["done"]):
    step(2)  # at most one status write a second: said until one lands
    time.sleep(0.2)
print("two steps")
"""
SLEEPER = """
import json, sys, time
args = json.load(sys.stdin)
time.sleep(args["seconds"])
print(f"slept {args['seconds']}")
"""


@pytest.fixture(scope="module")
def shared_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where tools may write for the test to read (each run has its own uid and /tmp)."""
    shared = tmp_path_factory.mktemp("tasks-shared")
    shared.chmod(0o1777)
    return shared


@pytest.fixture(scope="module")
def server(
    moto_endpoint: str, tmp_path_factory: pytest.TempPathFactory, shared_dir: Path
) -> Iterator[McpServer]:
    tmp = tmp_path_factory.mktemp("tasks")
    tools = tmp / "tools"
    tree = write_tool(
        tools,
        "tree",
        {
            "description": "Starts a child and sleeps.",
            "timeout_seconds": 300,
            "task": "optional",
            "input_schema": {"type": "object"},
        },
        TREE,
    )
    long = write_tool(
        tools,
        "five_minutes",
        {
            "description": "Sleeps as asked.",
            "timeout_seconds": 300,
            "task": "optional",
            "input_schema": {"type": "object"},
        },
        SLEEPER,
    )
    printer = write_tool(
        tools,
        "printer",
        {
            "description": "Prints `kib` KiB.",
            "task": "optional",
            "input_schema": {"type": "object"},
        },
        PRINTER,
    )
    stepper = write_tool(
        tools,
        "stepper",
        {
            "description": "Reports its steps as progress.",
            "timeout_seconds": 120,
            "task": "optional",
            "input_schema": {"type": "object"},
        },
        STEPPER,
    )
    yield from start_kiln(
        moto_endpoint,
        tmp,
        extra=[tree, long, printer, stepper],
        tasks=FAST_LEASES,
        local_time_budget_s=3.0,  # what a request has: a sync call is cut after about 2 s
        run_shared_dirs=(str(shared_dir),),
    )


def with_tasks(params: dict[str, Any] | None = None) -> dict[str, Any]:
    params = dict(params or {})
    envelope = meta()
    envelope[META_CAPS] = {"extensions": {EXT: {}}}
    params["_meta"] = envelope
    return params


def call_task(
    server: McpServer,
    name: str,
    arguments: dict[str, Any],
    *,
    headers: dict[str, str] | None = None,
    refused: bool = False,
) -> dict[str, Any]:
    params = with_tasks({"name": name, "arguments": arguments})
    answer = server.modern("tools/call", params, headers=headers)
    assert answer.status_code == 200, answer.text
    result: dict[str, Any] = answer.json()["result"]
    assert (result.get("isError") is True) if refused else ("taskId" in result), result
    return result


def get(server: McpServer, task_id: str, **kw: Any) -> httpx.Response:
    return server.modern("tasks/get", with_tasks({"taskId": task_id}), name=task_id, **kw)


def wait_for(check: Callable[[], Any], *, timeout: float = 30.0, every: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"not true within {timeout} s")


def settled(server: McpServer, task_id: str, *, timeout: float = 30.0, **kw: Any) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        body = get(server, task_id, **kw).json()
        assert "result" in body, body
        task: dict[str, Any] = body["result"]
        return task if task["status"] in TERMINAL else None

    result: dict[str, Any] = wait_for(check, timeout=timeout)
    return result


def test_a_task_tool_called_with_the_extension_returns_a_stored_task_and_later_its_result(
    server: McpServer,
) -> None:
    created = call_task(server, "slow_compute", {"seconds": 0.5, "label": "t"})
    assert created["resultType"] == "task"
    assert created["status"] == "working"
    assert isinstance(created["ttlMs"], int)
    assert created["ttlMs"] > 0
    assert len(created["taskId"]) >= 40
    first = get(server, created["taskId"])  # durably stored before the answer
    assert first.status_code == 200
    assert first.json()["result"]["taskId"] == created["taskId"]
    done = settled(server, created["taskId"])
    assert done["status"] == "completed"
    assert done["result"]["content"][0]["text"] == "t: computed after 0.5 s"
    assert done["resultType"] == "complete"


def test_a_tool_with_a_five_minute_limit_runs_past_the_request_and_completes(
    server: McpServer,
) -> None:
    sync = server.modern("tools/call", {"name": "five_minutes", "arguments": {"seconds": 6}})
    assert sync.json()["result"]["isError"] is True  # inside a request it is cut short
    created = call_task(server, "five_minutes", {"seconds": 6})
    assert created["status"] == "working"  # answered before the run ends
    done = settled(server, created["taskId"])
    assert done["status"] == "completed", done
    assert done["result"]["content"][0]["text"].startswith("slept 6")


def test_a_required_task_tool_without_the_extension_gets_missing_capability(
    server: McpServer,
) -> None:
    answer = server.modern("tools/call", {"name": "failing_job", "arguments": {}})
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["code"] == -32021
    assert EXT in error["data"]["requiredCapabilities"]["extensions"]


def test_an_optional_task_tool_without_the_extension_answers_inside_the_request(
    server: McpServer,
) -> None:
    answer = server.modern("tools/call", {"name": "slow_compute", "arguments": {"seconds": 0}})
    result = answer.json()["result"]
    assert result["resultType"] == "complete"
    assert "taskId" not in result


def test_task_methods_without_the_extension_get_missing_capability(server: McpServer) -> None:
    for method in ("tasks/get", "tasks/update", "tasks/cancel"):
        answer = server.modern(method, {"taskId": "x"}, name="x")
        assert answer.json()["error"]["code"] == -32021, method


def test_removed_methods_and_mismatched_names_are_refused_on_2026(server: McpServer) -> None:
    for method in ("tasks/result", "tasks/list"):
        answer = server.modern(method, with_tasks({"taskId": "x"}))
        assert answer.json()["error"]["code"] == -32601
    created = call_task(server, "slow_compute", {"seconds": 0})
    wrong = server.modern(
        "tasks/get", with_tasks({"taskId": created["taskId"]}), name="someone-else"
    )
    assert wrong.status_code == 400
    assert wrong.json()["error"]["code"] == -32020


def test_a_tool_error_completes_the_task_with_is_error_and_a_protocol_error_fails_it(
    server: McpServer,
) -> None:
    tool_error = settled(server, call_task(server, "failing_job", {})["taskId"])
    assert tool_error["status"] == "completed"
    assert tool_error["result"]["isError"] is True
    assert "failed on purpose" in tool_error["result"]["content"][0]["text"]
    failed = settled(server, call_task(server, "protocol_error_job", {})["taskId"])
    assert failed["status"] == "failed"
    assert "result" not in failed
    assert failed["error"]["code"] == -32603
    assert "failed on purpose" in failed["error"]["message"]


def test_unknown_ids_get_invalid_params(server: McpServer) -> None:
    answer = get(server, "no-such-task")
    assert answer.json()["error"]["code"] == -32602


def test_cancelling_a_running_task_leaves_no_process_behind(
    server: McpServer, shared_dir: Path
) -> None:
    pids_file = shared_dir / "pids"
    created = call_task(server, "tree", {"pids": str(pids_file), "seconds": 120})
    pids = wait_for(lambda: pids_file.exists() and pids_file.read_text().split())
    ack = server.modern(
        "tasks/cancel", with_tasks({"taskId": created["taskId"]}), name=created["taskId"]
    )
    assert ack.json()["result"] == {
        "resultType": "complete",
        "_meta": ack.json()["result"]["_meta"],
    }
    assert settled(server, created["taskId"])["status"] == "cancelled"
    wait_for(lambda: not any(Path(f"/proc/{pid}").exists() for pid in pids), timeout=15)
    again = server.modern(
        "tasks/cancel", with_tasks({"taskId": created["taskId"]}), name=created["taskId"]
    )
    assert again.json()["result"]["resultType"] == "complete"  # idempotent on a terminal task


def test_a_tasks_last_updated_time_moves_with_each_status_message(
    server: McpServer, shared_dir: Path
) -> None:
    go, done = shared_dir / "stepper-go", shared_dir / "stepper-done"
    created = call_task(server, "stepper", {"go": str(go), "done": str(done)})
    task_id = created["taskId"]

    def at(message: str) -> dict[str, Any] | None:
        task: dict[str, Any] = get(server, task_id).json()["result"]
        assert task["status"] == "working", task
        return task if task.get("statusMessage") == message else None

    first = wait_for(lambda: at("1 of 2: step 1"))
    assert first["lastUpdatedAt"] > created["createdAt"], first
    go.touch()
    second = wait_for(lambda: at("2 of 2: step 2"))
    assert second["lastUpdatedAt"] > first["lastUpdatedAt"], (first, second)
    done.touch()
    ended = settled(server, task_id)
    assert ended["status"] == "completed", ended
    assert ended["lastUpdatedAt"] >= second["lastUpdatedAt"], (second, ended)


def test_fifty_concurrent_tasks_all_settle_and_calls_still_get_through(
    server: McpServer,
) -> None:
    def one(index: int) -> str:
        arguments = {"seconds": 0.5, "label": f"n{index}"}
        return str(call_task(server, "slow_compute", arguments)["taskId"])

    with ThreadPoolExecutor(max_workers=10) as pool:
        ids = list(pool.map(one, range(50)))
    assert len(set(ids)) == 50
    # 50 runs wait for the runner (more than its queue holds), keeping their leases; a call
    # inside a request still has a runner slot of its own.
    sync = server.modern("tools/call", {"name": "add_vat", "arguments": {"net": 10}})
    assert sync.json()["result"]["isError"] is False
    ends = [settled(server, task_id, timeout=180) for task_id in ids]
    assert [e["status"] for e in ends] == ["completed"] * 50
    texts = {e["result"]["content"][0]["text"] for e in ends}
    assert texts == {f"n{i}: computed after 0.5 s" for i in range(50)}


def test_a_second_principal_can_neither_read_nor_cancel_the_first_ones_task(
    server: McpServer,
) -> None:
    keyed = {"Authorization": f"Bearer {AUTHOR_KEY}"}
    created = call_task(server, "slow_compute", {"seconds": 3}, headers=keyed)
    task_id = created["taskId"]
    assert get(server, task_id, headers=keyed).json()["result"]["status"] == "working"
    foreign = get(server, task_id)  # anonymous: another principal
    assert foreign.json()["error"]["code"] == -32602
    assert "status" not in foreign.text
    cancel = server.modern("tasks/cancel", with_tasks({"taskId": task_id}), name=task_id)
    assert cancel.json()["error"]["code"] == -32602
    assert settled(server, task_id, headers=keyed)["status"] == "completed"


def test_the_2025_11_25_flow_creates_a_task_polls_it_and_gets_the_result(
    server: McpServer,
) -> None:
    keyed = {"Authorization": f"Bearer {AUTHOR_KEY}"}
    init = server.legacy(
        "initialize",
        {
            "protocolVersion": "2025-11-25",
            "capabilities": {"tasks": {}},
            "clientInfo": {"name": "t", "version": "1"},
        },
    ).json()["result"]
    assert init["capabilities"]["tasks"]["requests"]["tools"]["call"] == {}
    listed = {t["name"]: t for t in server.legacy("tools/list").json()["result"]["tools"]}
    assert listed["slow_compute"]["execution"] == {"taskSupport": "optional"}
    assert listed["failing_job"]["execution"] == {"taskSupport": "required"}
    assert "execution" not in listed["greet"]

    def legacy(method: str, params: dict[str, Any]) -> dict[str, Any]:
        message = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        body: dict[str, Any] = server.post(
            message, {"MCP-Protocol-Version": "2025-11-25", **keyed}
        ).json()
        return body

    created = legacy(
        "tools/call",
        {
            "name": "slow_compute",
            "arguments": {"seconds": 0.5, "label": "v1"},
            "task": {"ttl": 60000},
        },
    )["result"]["task"]
    assert created["status"] == "working"
    assert "ttl" in created
    task_id = created["taskId"]
    wait_for(lambda: legacy("tasks/get", {"taskId": task_id})["result"]["status"] == "completed")
    result = legacy("tasks/result", {"taskId": task_id})["result"]
    assert result["content"][0]["text"] == "v1: computed after 0.5 s"
    assert result["_meta"]["io.modelcontextprotocol/related-task"] == {"taskId": task_id}
    listed_tasks = legacy("tasks/list", {})["result"]["tasks"]
    assert task_id in {t["taskId"] for t in listed_tasks}
    refused = legacy("tasks/cancel", {"taskId": task_id})["error"]
    assert refused["code"] == -32602
    assert "terminal" in refused["message"]
    required = legacy("tools/call", {"name": "failing_job", "arguments": {}})["error"]
    assert required["code"] == -32601
    tool_error = legacy("tools/call", {"name": "failing_job", "arguments": {}, "task": {}})
    failing_id = tool_error["result"]["task"]["taskId"]
    wait_for(lambda: legacy("tasks/get", {"taskId": failing_id})["result"]["status"] == "failed")
    assert legacy("tasks/result", {"taskId": failing_id})["result"]["isError"] is True


def test_callers_and_the_process_are_capped_on_running_tasks_with_clear_errors(
    moto_endpoint: str, tmp_path: Path
) -> None:
    capped = TaskSettings(
        max_running_per_principal=2, max_running_per_process=3, heartbeat_s=0.2, lease_s=2.0
    )
    keyed = {"Authorization": f"Bearer {AUTHOR_KEY}"}
    for server in start_kiln(moto_endpoint, tmp_path, tasks=capped):
        first = [call_task(server, "slow_compute", {"seconds": 60}) for _ in range(2)]
        refused = call_task(server, "slow_compute", {"seconds": 60}, refused=True)
        assert "Too many running tasks" in refused["content"][0]["text"]
        assert "already has 2 working" in refused["content"][0]["text"]
        # Another caller has room of its own, until the process is full.
        first.append(call_task(server, "slow_compute", {"seconds": 60}, headers=keyed))
        full = call_task(server, "slow_compute", {"seconds": 60}, headers=keyed, refused=True)
        assert "running as many tasks as it may (3)" in full["content"][0]["text"]
        for task, headers in zip(first, [None, None, keyed], strict=True):
            task_id = task["taskId"]
            server.modern(
                "tasks/cancel", with_tasks({"taskId": task_id}), name=task_id, headers=headers
            )
        wait_for(partial(call_task_or_none, server))


def call_task_or_none(server: McpServer) -> dict[str, Any] | None:
    """A new task once there is room again (cancelled runs free theirs as they stop)."""
    params = with_tasks({"name": "slow_compute", "arguments": {"seconds": 0}})
    result: dict[str, Any] = server.modern("tools/call", params).json()["result"]
    return result if "taskId" in result else None


def test_a_result_too_large_for_its_record_is_kept_in_s3_and_read_back(
    server: McpServer,
) -> None:
    kiln = server.running.kiln
    printer = call_task(server, "printer", {"kib": 400})
    done = settled(server, printer["taskId"])
    assert done["status"] == "completed"
    assert len(done["result"]["content"][0]["text"]) == 400 * 1024
    listed = kiln.clients.s3.list_objects_v2(Bucket=kiln.settings.bucket, Prefix="tasks/")
    assert any(o["Key"].endswith("/result.json") for o in listed.get("Contents", []))


def test_arguments_too_large_for_a_task_record_are_refused_with_their_size(
    server: McpServer,
) -> None:
    refused = call_task(server, "printer", {"kib": 1, "pad": "x" * 300_000}, refused=True)
    text = refused["content"][0]["text"]
    assert "was not started as a task" in text
    assert "at most 262144 bytes" in text


def test_an_author_starts_a_long_run_over_rest_and_polls_it(server: McpServer) -> None:
    running = server.running
    started = running.api(
        "POST", "/api/tools/slow_compute/run", json={"arguments": {"seconds": 1}, "task": True}
    )
    assert started.status_code == 202, started.text
    task = started.json()
    assert task["status"] == "working"
    assert started.headers["Location"] == task["poll"] == f"/api/tasks/{task['taskId']}"

    def ended() -> dict[str, Any] | None:
        polled: dict[str, Any] = running.api("GET", task["poll"]).json()
        return polled if polled["status"] != "working" else None

    done = wait_for(ended)
    assert done["status"] == "completed"
    assert done["mcp_result"]["content"][0]["text"] == "slow_compute: computed after 1 s"
    keyed = {"Authorization": f"Bearer {AUTHOR_KEY}"}  # the same key reads it over MCP too
    assert get(server, task["taskId"], headers=keyed).json()["result"]["status"] == "completed"
    assert get(server, task["taskId"]).json()["error"]["code"] == -32602  # not anonymously
    assert running.api("GET", task["poll"], key=None).status_code == 401


def test_an_author_cancels_a_rest_task_and_plain_tools_are_not_run_as_tasks(
    server: McpServer,
) -> None:
    running = server.running
    task = running.api(
        "POST", "/api/tools/slow_compute/run", json={"arguments": {"seconds": 60}, "task": True}
    ).json()
    cancelled = running.api("POST", f"/api/tasks/{task['taskId']}/cancel")
    assert cancelled.json()["status"] == "cancelled"
    assert running.api("GET", "/api/tasks/no-such-task").status_code == 404
    plain = running.api("POST", "/api/tools/add_vat/run", json={"arguments": {}, "task": True})
    assert plain.status_code == 422
    assert plain.json()["error"]["code"] == "not_a_task_tool"
    bad = running.api(
        "POST", "/api/tools/slow_compute/run", json={"arguments": {"seconds": -1}, "task": True}
    )
    assert bad.status_code == 422
    assert bad.json()["error"]["code"] == "invalid_arguments"


def test_a_ttl_a_client_asks_for_is_honoured_down_to_what_the_tools_run_needs(
    server: McpServer,
) -> None:
    """It was raised to about 27 minutes whatever the tool, and nothing said so."""

    def task_ttl(ttl: int) -> int:
        params = {"name": "printer", "arguments": {"kib": 1}, "task": {"ttl": ttl}}
        message = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
        answer = server.post(message, {"MCP-Protocol-Version": "2025-11-25"})
        created: dict[str, Any] = answer.json()["result"]["task"]
        return int(created["ttl"])

    assert task_ttl(300_000) == 300_000
    # printer's timeout (the default 30 s), the worker's start grace, a minute to read it
    assert task_ttl(1_000) == int((30 + FAST_LEASES.start_grace_s + 60) * 1000)
