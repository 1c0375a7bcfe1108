"""Tools that talk back (protocol/talking.py) through real HTTP into kiln dev's app.

2026-07-28: questions come back as `input_required` with a sealed `requestState`; the next
call carries the answers. 2025: progress and logs as SSE events on the POST's answer, and
questions asked on the held stream, answered by POSTed JSON-RPC responses.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from support.app import AUTHOR_KEY, META_CAPS, ROOT, McpServer, meta, start_kiln

ALL_CAPS = {"elicitation": {}, "sampling": {}, "roots": {}}


@pytest.fixture(scope="module")
def server(moto_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[McpServer]:
    examples = [
        ROOT / "examples" / "tools" / name for name in ("pick_account", "pick_account_node")
    ]
    yield from start_kiln(moto_endpoint, tmp_path_factory.mktemp("talk"), extra=examples)


def call(
    server: McpServer, name: str, caps: dict[str, Any] | None = None, **params: Any
) -> httpx.Response:
    body = {"name": name, "arguments": params.pop("arguments", {}), **params}
    body["_meta"] = {
        **meta(),
        META_CAPS: ALL_CAPS if caps is None else caps,
        **params.pop("_meta", {}),
    }
    return server.modern("tools/call", body)


def result_of(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 200, response.text
    payload = response.json()
    assert "result" in payload, payload
    return dict(payload["result"])


def accept(content: dict[str, Any]) -> dict[str, Any]:
    return {"action": "accept", "content": content}


def test_a_question_comes_back_as_input_required_and_the_answer_completes_the_call(
    server: McpServer,
) -> None:
    first = result_of(call(server, "test_input_required_result_elicitation"))
    assert first["resultType"] == "input_required"
    assert first["inputRequests"]["user_name"]["method"] == "elicitation/create"
    assert first["inputRequests"]["user_name"]["params"]["message"] == "What is your name?"
    state = first["requestState"]
    assert state.startswith("k1.")
    assert "user_name" not in state
    second = result_of(
        call(
            server,
            "test_input_required_result_elicitation",
            inputResponses={"user_name": accept({"name": "Ada"})},
            requestState=state,
        )
    )
    assert second["resultType"] == "complete"
    assert second["content"] == [{"type": "text", "text": "Hello, Ada!"}]


def test_each_round_gets_a_new_state_carrying_the_answers_so_far(server: McpServer) -> None:
    name = "test_input_required_result_multi_round"
    first = result_of(call(server, name))
    assert list(first["inputRequests"]) == ["step1"]
    second = result_of(
        call(
            server,
            name,
            inputResponses={"step1": accept({"name": "Ada"})},
            requestState=first["requestState"],
        )
    )
    assert list(second["inputRequests"]) == ["step2"]
    assert second["requestState"] != first["requestState"]
    third = result_of(
        call(
            server,
            name,
            inputResponses={"step2": accept({"color": "teal"})},
            requestState=second["requestState"],
        )
    )
    assert third["content"][0]["text"] == "Ada likes teal"


def test_three_kinds_of_question_in_one_round(server: McpServer) -> None:
    name = "test_input_required_result_multiple_inputs"
    first = result_of(call(server, name))
    methods = {key: r["method"] for key, r in first["inputRequests"].items()}
    assert methods == {
        "user_name": "elicitation/create",
        "greeting": "sampling/createMessage",
        "client_roots": "roots/list",
    }
    answers = {
        "user_name": accept({"name": "Ada"}),
        "greeting": {"role": "assistant", "content": {"type": "text", "text": "Hi"}, "model": "m"},
        "client_roots": {"roots": [{"uri": "file:///work", "name": "work"}]},
    }
    done = result_of(call(server, name, inputResponses=answers, requestState=first["requestState"]))
    assert done["content"][0]["text"] == "Hi Ada, 1 root(s)"


def test_a_tampered_state_is_refused_with_invalid_params_and_nothing_runs(
    server: McpServer,
) -> None:
    name = "test_input_required_result_tampered_state"
    first = result_of(call(server, name))
    response = call(
        server,
        name,
        inputResponses={"confirm": accept({"ok": True})},
        requestState=first["requestState"] + "A",
    )
    assert response.status_code == 200, response.text  # in-band, as unknown-tool errors are
    error = response.json()["error"]
    assert error["code"] == -32602
    assert "requestState was not issued by this server for this call" in error["message"]


def test_a_state_is_bound_to_the_arguments(server: McpServer) -> None:
    first = result_of(call(server, "test_elicitation", arguments={"message": "one"}))
    response = call(
        server,
        "test_elicitation",
        arguments={"message": "two"},
        inputResponses={"user": accept({"username": "a", "email": "b"})},
        requestState=first["requestState"],
    )
    assert response.json()["error"]["code"] == -32602


def test_an_answer_that_is_not_its_methods_result_type_is_refused_by_name(
    server: McpServer,
) -> None:
    first = result_of(call(server, "test_input_required_result_sampling"))
    response = call(
        server,
        "test_input_required_result_sampling",
        inputResponses={"capital_question": {"text": "Paris"}},
        requestState=first["requestState"],
    )
    message = response.json()["error"]["message"]
    assert "inputResponses.capital_question is not a valid CreateMessageResult" in message


def test_a_question_the_client_cannot_answer_is_a_missing_capability_error(
    server: McpServer,
) -> None:
    response = call(server, "test_input_required_result_elicitation", caps={"sampling": {}})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == -32021
    assert error["data"] == {"requiredCapabilities": {"elicitation": {}}}


def test_the_script_sees_what_the_client_can_answer(server: McpServer) -> None:
    first = result_of(
        call(server, "test_input_required_result_capabilities", caps={"sampling": {}})
    )
    assert {r["method"] for r in first["inputRequests"].values()} == {"sampling/createMessage"}


def test_input_responses_of_the_wrong_shape_are_invalid_params(server: McpServer) -> None:
    for responses in (None, [], {"user_name": 12345}):
        response = call(server, "test_input_required_result_elicitation", inputResponses=responses)
        assert response.json()["error"]["code"] == -32602, response.text


def sse_messages(response: httpx.Response) -> list[dict[str, Any]]:
    assert response.headers["content-type"].startswith("text/event-stream"), response.text
    return [
        json.loads(line.removeprefix("data: "))
        for line in response.text.splitlines()
        if line.startswith("data: ")
    ]


def test_progress_arrives_as_events_before_the_result_on_both_wires(server: McpServer) -> None:
    legacy = server.legacy(
        "tools/call",
        {"name": "test_tool_with_progress", "arguments": {}, "_meta": {"progressToken": "p1"}},
    )
    modern = call(server, "test_tool_with_progress", _meta={"progressToken": "p1"})
    for response in (legacy, modern):
        messages = sse_messages(response)
        progress = [m["params"] for m in messages if m.get("method") == "notifications/progress"]
        assert [p["progress"] for p in progress] == [0, 50, 100]
        assert {p["progressToken"] for p in progress} == {"p1"}
        assert messages[-1]["result"]["content"][0]["text"] == "Progress test completed"


def test_without_a_progress_token_the_answer_is_plain_json(server: McpServer) -> None:
    response = server.legacy("tools/call", {"name": "test_tool_with_progress", "arguments": {}})
    assert response.headers["content-type"] == "application/json"
    assert response.json()["result"]["content"][0]["text"] == "Progress test completed"


def test_logs_go_out_on_2025_and_only_with_a_log_level_on_2026(server: McpServer) -> None:
    legacy = sse_messages(
        server.legacy("tools/call", {"name": "test_tool_with_logging", "arguments": {}})
    )
    logs = [m["params"]["data"] for m in legacy if m.get("method") == "notifications/message"]
    assert logs == ["Tool execution started", "Tool processing data", "Tool execution completed"]
    quiet = call(server, "test_tool_with_logging")
    assert quiet.headers["content-type"] == "application/json"
    loud = call(
        server, "test_tool_with_logging", _meta={"io.modelcontextprotocol/logLevel": "info"}
    )
    assert len([m for m in sse_messages(loud) if m.get("method") == "notifications/message"]) == 3
    above = call(
        server, "test_tool_with_logging", _meta={"io.modelcontextprotocol/logLevel": "error"}
    )
    assert above.headers["content-type"] == "application/json"


def test_on_2025_kiln_dev_asks_on_the_held_stream_and_the_posted_answer_completes_it(
    server: McpServer,
) -> None:
    body = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": "test_elicitation", "arguments": {"message": "Who are you?"}},
    }
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2025-11-25",
    }
    seen: list[dict[str, Any]] = []
    with (
        httpx.Client(timeout=30) as client,
        client.stream("POST", server.url, json=body, headers=headers) as stream,
    ):
        for line in stream.iter_lines():
            if not line.startswith("data: "):
                continue
            message = json.loads(line.removeprefix("data: "))
            seen.append(message)
            if message.get("method") == "elicitation/create":
                assert message["params"]["message"] == "Who are you?"
                reply = {
                    "jsonrpc": "2.0",
                    "id": message["id"],
                    "result": accept({"username": "ada", "email": "a@x"}),
                }
                posted = threading.Thread(
                    target=server.post, args=(reply, {"MCP-Protocol-Version": "2025-11-25"})
                )
                posted.start()
                posted.join()
    assert seen[-1]["id"] == 7
    assert seen[-1]["result"]["content"][0]["text"] == (
        'User response: action=accept, content={"username": "ada", "email": "a@x"}'
    )


@pytest.mark.parametrize("name", ["pick_account", "pick_account_node"])
def test_the_readme_examples_ask_then_act_only_on_accept(server: McpServer, name: str) -> None:
    first = result_of(call(server, name, arguments={"amount": 5}))
    question = first["inputRequests"]["account"]
    assert question["params"]["message"] == "Pay 5 from?"
    state = first["requestState"]
    paid = call(
        server,
        name,
        arguments={"amount": 5},
        inputResponses={"account": accept({"account": "savings"})},
        requestState=state,
    )
    assert result_of(paid)["content"][0]["text"] == "Paid 5 from savings"
    declined = call(
        server,
        name,
        arguments={"amount": 5},
        inputResponses={"account": {"action": "decline"}},
        requestState=state,
    )
    assert result_of(declined)["isError"] is True
    assert "Nothing paid: the user chose decline" in result_of(declined)["content"][0]["text"]


TASKS = "io.modelcontextprotocol/tasks"


def task_call(server: McpServer, method: str, **params: Any) -> dict[str, Any]:
    params["_meta"] = {**meta(), META_CAPS: {**ALL_CAPS, "extensions": {TASKS: {}}}}
    name = params.get("name") or params.get("taskId")
    response = server.modern(method, params, name=name)
    return result_of(response)


def task_in(server: McpServer, task_id: str, *statuses: str) -> dict[str, Any]:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        task = task_call(server, "tasks/get", taskId=task_id)
        if task["status"] in statuses:
            return task
        time.sleep(0.1)
    raise AssertionError(f"task {task_id} never reached {statuses}: {task}")


def test_a_task_that_asks_waits_in_input_required_and_resumes_through_tasks_update(
    server: McpServer,
) -> None:
    created = task_call(
        server, "tools/call", name="confirm_delete", arguments={"filename": "a.txt"}
    )
    task = task_in(server, created["taskId"], "input_required")
    assert task["inputRequests"]["confirm"]["method"] == "elicitation/create"
    assert task["inputRequests"]["confirm"]["params"]["message"] == "Delete a.txt?"
    ack = task_call(
        server,
        "tasks/update",
        taskId=created["taskId"],
        inputResponses={"confirm": accept({"confirm": True}), "unknown": {"ignored": True}},
    )
    assert ack == {"resultType": "complete", "_meta": ack["_meta"]}
    done = task_in(server, created["taskId"], "completed", "failed", "cancelled")
    assert done["result"]["content"][0]["text"] == "Deleted a.txt"


def test_a_task_answered_one_question_at_a_time_stays_waiting_for_the_rest(
    server: McpServer,
) -> None:
    created = task_call(server, "tools/call", name="multi_input", arguments={})
    task = task_in(server, created["taskId"], "input_required")
    assert set(task["inputRequests"]) == {"first", "second"}
    task_call(
        server,
        "tasks/update",
        taskId=created["taskId"],
        inputResponses={"first": accept({"name": "one"})},
    )
    waiting = task_call(server, "tasks/get", taskId=created["taskId"])
    assert waiting["status"] == "input_required"
    assert set(waiting["inputRequests"]) == {"second"}
    task_call(
        server,
        "tasks/update",
        taskId=created["taskId"],
        inputResponses={"second": accept({"name": "two"})},
    )
    done = task_in(server, created["taskId"], "completed", "failed", "cancelled")
    assert done["result"]["content"][0]["text"] == "one and two"


def test_a_wrong_answer_type_for_a_tasks_question_is_invalid_params(server: McpServer) -> None:
    created = task_call(
        server, "tools/call", name="confirm_delete", arguments={"filename": "b.txt"}
    )
    task_in(server, created["taskId"], "input_required")
    params = {
        "taskId": created["taskId"],
        "inputResponses": {"confirm": {"action": "maybe"}},
        "_meta": {**meta(), META_CAPS: {"extensions": {TASKS: {}}}},
    }
    error = server.modern("tasks/update", params, name=created["taskId"]).json()["error"]
    assert error["code"] == -32602
    assert "inputResponses.confirm is not a valid ElicitResult" in error["message"]
    task_call(server, "tasks/cancel", taskId=created["taskId"])
    assert task_call(server, "tasks/get", taskId=created["taskId"])["status"] == "cancelled"


def test_a_tool_that_asks_first_gets_its_answers_in_the_request_then_runs_as_a_task(
    server: McpServer,
) -> None:
    first = task_call(server, "tools/call", name="test_tool_with_task", arguments={})
    assert first["resultType"] == "input_required"
    assert "taskId" not in first
    created = task_call(
        server,
        "tools/call",
        name="test_tool_with_task",
        arguments={},
        inputResponses={"user_name": accept({"name": "Ada"})},
        requestState=first["requestState"],
    )
    assert created["resultType"] == "task"
    assert "requestState" not in created
    done = task_in(server, created["taskId"], "completed", "failed", "cancelled")
    assert done["result"]["content"][0]["text"] == "Hello, Ada! (from a task)"


def test_an_authors_test_run_shows_talk_and_questions_and_takes_answers(server: McpServer) -> None:
    path = "/api/tools/test_input_required_result_elicitation/run"
    asked = server.running.api("POST", path, json={"arguments": {}})
    assert asked.status_code == 200, asked.text
    (question,) = asked.json()["questions"]
    assert question["key"] == "user_name"
    assert question["method"] == "elicitation/create"
    answered = server.running.api(
        "POST", path, json={"arguments": {}, "answers": {"user_name": accept({"name": "Ada"})}}
    )
    assert answered.json()["stdout"] == "Hello, Ada!\n"
    assert answered.json()["questions"] == []
    progress = server.running.api("POST", "/api/tools/test_tool_with_progress/run", json={})
    talk = progress.json()["talk"]
    assert [t["progress"] for t in talk if t["kind"] == "progress"] == [0, 50, 100]
    bad = server.running.api("POST", path, json={"arguments": {}, "answers": {"user_name": 3}})
    assert bad.status_code == 422
    assert "answers: must be an object" in bad.text


GATED = """import json, os, socket, sys

talk = os.fdopen(int(os.environ["KILN_TALK_FD"]), "w", buffering=1)
json.load(sys.stdin)
gate = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
gate.bind(("127.0.0.1", 0))
gate.settimeout(20)
talk.write(json.dumps({"progress": 1, "total": 2, "message": str(gate.getsockname()[1])}) + "\\n")
try:
    gate.recv(16)
except socket.timeout:
    sys.exit("nobody read the first step while the run went on")
talk.write(json.dumps({"log": "info", "data": "released"}) + "\\n")
print("both steps done")
"""


def test_a_streamed_test_run_sends_each_line_as_it_comes_then_the_answer(
    server: McpServer,
) -> None:
    """The first progress line is read while the script still waits for this test, which
    releases it only then (a datagram to the port it reported): so it came before the end."""
    body = {"name": "gated", "description": "Waits for a datagram.", "language": "python",
            "code": GATED, "input_schema": {"type": "object"}, "timeout_seconds": 30}  # fmt: skip
    made = server.running.api("POST", "/api/tools", json=body)
    assert made.status_code == 201, made.text
    headers = {"Authorization": f"Bearer {AUTHOR_KEY}", "Accept": "text/event-stream"}
    url = f"{server.running.url}/api/tools/gated/run"
    with server.http.stream("POST", url, json={"arguments": {}}, headers=headers) as answer:
        assert answer.status_code == 200
        assert answer.headers["content-type"].startswith("text/event-stream")
        events = (json.loads(line[6:]) for line in answer.iter_lines() if line.startswith("data: "))
        first = next(events)
        assert first["talk"]["kind"] == "progress", first
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as release:
            release.sendto(b"go", ("127.0.0.1", int(first["talk"]["message"])))
        rest = list(events)
    assert rest[0] == {
        "talk": {"kind": "log", "level": "info", "data": "released", "logger": "tool/gated"}
    }
    reply = rest[-1]["reply"]
    assert reply["stdout"] == "both steps done\n", reply
    assert [t["kind"] for t in reply["talk"]] == ["progress", "log"]
    assert reply["mcp_result"]["content"][0]["text"] == "both steps done"
    refused = server.http.post(url, json={"arguments": []}, headers=headers)
    assert refused.status_code == 422, refused.text  # before any stream: answered as usual
    assert refused.headers["content-type"].startswith("application/json")


@pytest.mark.parametrize(
    ("fence", "example"),
    [("python", "pick_account/main.py"), ("js", "pick_account_node/main.js")],
)
def test_the_runner_readme_snippets_are_the_example_files_the_tests_run(
    fence: str, example: str
) -> None:
    readme = (ROOT / "functions" / "kiln" / "runner" / "README.md").read_text()
    marker = f"(`examples/tools/{example}`):\n\n```{fence}\n"
    start = readme.index(marker) + len(marker)
    snippet = readme[start : readme.index("```", start)]
    assert snippet == (ROOT / "examples" / "tools" / example).read_text()
