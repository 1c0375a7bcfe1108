"""Idempotent calls on a real `kiln dev`: a writing tool called again with its key is answered
with its first result and not run again (kiln.protocol.idempotency, kiln.accounting.idempotency).

The tool posts to a tally (`support.tally`) and prints the count it got back, so a second run
shows both in the tally and in its answer.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from support.devserver import DEV_KEY, DevServer, clean_env, kiln_dev
from support.faultproxy import fault_proxy
from support.tally import TOOL, Tally, tally

META_KEY = "kiln/idempotency-key"
HEADERS = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-11-25"}
# Runs reach the tally's port (kiln dev fences TCP to common ports when its store is local).
ENV = {"KILN_RUN_TCP_PORTS": "all", "KILN_IDEMPOTENCY_MAX_ANSWER_BYTES": "4096"}


@pytest.fixture(scope="module")
def counter() -> Iterator[Tally]:
    with tally() as found:
        yield found


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    with kiln_dev(tmp_path_factory.mktemp("idempotent") / "state", env=ENV) as server:
        made = server.api("POST", "/api/tools", json=TOOL)
        assert made.status_code == 201, made.text
        yield server


@pytest.fixture(scope="module")
def keys(dev: DevServer) -> tuple[str, str]:
    return dev.create_key("alice"), dev.create_key("bob")


def call(
    url: str,
    key: str,
    arguments: dict[str, Any],
    idem: str | None,
    *,
    header: str | None = None,
    timeout: float = 60,
    name: str = "append_run",
) -> dict[str, Any] | None:
    """One tools/call's JSON-RPC answer, None when none arrived (it was dropped)."""
    params: dict[str, Any] = {"name": name, "arguments": arguments}
    if idem is not None:
        params["_meta"] = {META_KEY: idem}
    headers = {**HEADERS, "Authorization": f"Bearer {key}"}
    if header is not None:
        headers["Idempotency-Key"] = header
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
    try:
        answer = httpx.post(url + "/mcp", json=body, headers=headers, timeout=timeout)
    except httpx.TransportError:
        return None
    assert answer.status_code == 200, answer.text
    found: dict[str, Any] = answer.json()
    return found


def result_of(answer: dict[str, Any] | None) -> dict[str, Any]:
    """A result as its caller reads it (the replay's mark in `_meta` aside)."""
    assert answer is not None, "no answer"
    assert "result" in answer, answer
    return {k: v for k, v in answer["result"].items() if k != "_meta"}


def run_number(answer: dict[str, Any] | None) -> int:
    text = result_of(answer)["content"][0]["text"]
    return int(json.loads(text)["run"])


def label() -> str:
    return uuid.uuid4().hex[:12]


def test_twenty_calls_with_one_key_whose_first_answers_are_dropped_run_once(
    dev: DevServer, keys: tuple[str, str], counter: Tally
) -> None:
    alice, _ = keys
    arguments, idem = {"url": counter.url, "label": label()}, f"k-{uuid.uuid4()}"
    answers = []
    with fault_proxy(dev.url) as proxy:
        proxy.lose_replies(2, idem.encode())  # the run happens, its answer never arrives
        for _ in range(20):
            answers.append(call(proxy.url, alice, arguments, idem, timeout=15))
    assert answers[:2] == [None, None], answers[:2]
    assert counter.runs(arguments["label"]) == 1, dev.log and dev.log.read_text()[-3000:]
    first = result_of(answers[2])
    assert first["isError"] is False, first
    assert all(result_of(a) == first for a in answers[2:]), answers
    assert run_number(answers[2]) == 1
    mark = answers[-1]["result"]["_meta"]["kiln/idempotent-replay"]  # type: ignore[index]
    assert mark["idempotencyKey"] == idem, mark


def test_the_same_key_with_other_arguments_is_refused_and_does_not_run(
    dev: DevServer, keys: tuple[str, str], counter: Tally
) -> None:
    alice, _ = keys
    arguments, idem = {"url": counter.url, "label": label()}, str(uuid.uuid4())
    assert run_number(call(dev.url, alice, arguments, idem)) == 1
    other = call(dev.url, alice, {**arguments, "note": "changed"}, idem)
    assert other is not None
    assert "error" in other, other
    assert other["error"]["code"] == -32002, other
    assert other["error"]["data"]["reason"] == "other_arguments", other
    assert "other arguments" in other["error"]["message"], other
    assert counter.runs(arguments["label"]) == 1


def test_another_caller_with_the_same_key_gets_a_run_of_its_own(
    dev: DevServer, keys: tuple[str, str], counter: Tally
) -> None:
    alice, bob = keys
    arguments, idem = {"url": counter.url, "label": label()}, str(uuid.uuid4())
    assert run_number(call(dev.url, alice, arguments, idem)) == 1
    assert run_number(call(dev.url, bob, arguments, idem)) == 2
    assert run_number(call(dev.url, bob, arguments, idem)) == 2  # bob's own, replayed
    assert run_number(call(dev.url, alice, arguments, idem)) == 1


def test_calls_without_a_key_run_every_time(
    dev: DevServer, keys: tuple[str, str], counter: Tally
) -> None:
    alice, _ = keys
    arguments = {"url": counter.url, "label": label()}
    assert [run_number(call(dev.url, alice, arguments, None)) for _ in range(3)] == [1, 2, 3]


def test_the_header_and_the_meta_key_name_the_same_call(
    dev: DevServer, keys: tuple[str, str], counter: Tally
) -> None:
    alice, _ = keys
    arguments, idem = {"url": counter.url, "label": label()}, str(uuid.uuid4())
    first = call(dev.url, alice, arguments, None, header=f'"{idem}"')  # an sf-string
    again = call(dev.url, alice, arguments, idem)
    assert result_of(again) == result_of(first)
    assert counter.runs(arguments["label"]) == 1


@pytest.mark.parametrize(
    ("idem", "header", "says"),
    [
        ("x" * 256, None, 'params._meta["kiln/idempotency-key"] must be a string of 1 to 255'),
        ("has space", None, "each a letter, a digit or one of"),
        (None, "bad key!", "the Idempotency-Key header must be a string of 1 to 255"),
        ("one-key", "another-key", "name different keys"),
    ],
)
def test_a_malformed_key_is_refused_with_the_rule_and_nothing_runs(
    dev: DevServer,
    keys: tuple[str, str],
    counter: Tally,
    idem: str | None,
    header: str | None,
    says: str,
) -> None:
    alice, _ = keys
    arguments = {"url": counter.url, "label": label()}
    answer = call(dev.url, alice, arguments, idem, header=header)
    assert answer is not None
    assert answer["error"]["code"] == -32602, answer
    assert says in answer["error"]["message"], answer
    assert counter.runs(arguments["label"]) == 0


def test_a_call_sent_again_while_it_runs_is_answered_in_progress_and_runs_once(
    dev: DevServer, keys: tuple[str, str], counter: Tally
) -> None:
    alice, _ = keys
    arguments, idem = {"url": counter.url, "label": label()}, str(uuid.uuid4())
    counter.hits.clear()
    counter.hold()
    try:
        with ThreadPoolExecutor(1) as pool:
            first = pool.submit(call, dev.url, alice, arguments, idem)
            assert counter.hits.wait(60), "the first call's run never started"
            second = call(dev.url, alice, arguments, idem)  # waits 5 s, then says why
            counter.release()
            answered = first.result()
    finally:
        counter.release()
    assert second is not None
    assert second["error"]["data"]["reason"] == "in_progress", second
    assert second["error"]["data"]["retryAfterSeconds"] >= 1, second
    assert run_number(answered) == 1
    assert result_of(call(dev.url, alice, arguments, idem)) == result_of(answered)
    assert counter.runs(arguments["label"]) == 1


def test_eight_calls_sent_together_with_one_key_run_once(
    dev: DevServer, keys: tuple[str, str], counter: Tally
) -> None:
    alice, _ = keys
    arguments, idem = {"url": counter.url, "label": label()}, str(uuid.uuid4())
    start = threading.Barrier(8)

    def together() -> dict[str, Any] | None:
        start.wait()
        return call(dev.url, alice, arguments, idem)

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda _: together(), range(8)))
    assert counter.runs(arguments["label"]) == 1, answers
    results = [a for a in answers if a is not None and "result" in a]
    waiting = [a for a in answers if a is not None and "error" in a]
    assert results, answers
    assert all(result_of(a) == result_of(results[0]) for a in results), answers
    assert all(a["error"]["data"]["reason"] == "in_progress" for a in waiting), waiting


def test_a_result_over_the_cap_is_not_kept_and_the_call_is_not_run_again(
    dev: DevServer, keys: tuple[str, str], counter: Tally
) -> None:
    alice, _ = keys
    big = {**TOOL, "name": "append_big",
           "code": TOOL["code"] + "print('x' * 5000)\n"}  # fmt: skip
    made = dev.api("POST", "/api/tools", json=big)
    assert made.status_code == 201, made.text
    arguments, idem = {"url": counter.url, "label": label()}, str(uuid.uuid4())
    first = call(dev.url, alice, arguments, idem, name="append_big")
    assert result_of(first)["isError"] is False, first
    again = call(dev.url, alice, arguments, idem, name="append_big")
    assert again is not None
    assert again["error"]["data"]["reason"] == "result_not_kept", again
    assert "larger than results are kept for" in again["error"]["message"], again
    assert counter.runs(arguments["label"]) == 1


def test_a_key_whose_window_passed_runs_the_call_again(tmp_path: Path, counter: Tally) -> None:
    env = {**ENV, "KILN_IDEMPOTENCY_WINDOW_S": "2"}
    with kiln_dev(tmp_path / "state", env=env) as server:
        assert server.api("POST", "/api/tools", json=TOOL).status_code == 201
        alice = server.create_key("alice")
        arguments, idem = {"url": counter.url, "label": label()}, str(uuid.uuid4())
        assert run_number(call(server.url, alice, arguments, idem)) == 1
        deadline = time.monotonic() + 60
        seen = [1]
        while seen[-1] == 1:  # replays until the window passes, then a run
            assert time.monotonic() < deadline, f"the key never expired: {seen}"
            time.sleep(0.3)
            seen.append(run_number(call(server.url, alice, arguments, idem)))
        assert seen[-1] == 2, seen
        assert counter.runs(arguments["label"]) == 2, seen


def rpc(url: str, key: str, method: str, params: dict[str, Any]) -> dict[str, Any]:
    headers = {**HEADERS, "Authorization": f"Bearer {key}"}
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    answer = httpx.post(url + "/mcp", json=body, headers=headers, timeout=60)
    assert answer.status_code == 200, answer.text
    found: dict[str, Any] = answer.json()
    assert "result" in found, found
    return found


def test_a_task_created_again_with_its_key_is_the_same_task_and_runs_once(
    dev: DevServer, keys: tuple[str, str], counter: Tally
) -> None:
    alice, _ = keys
    made = dev.api("POST", "/api/tools", json={**TOOL, "name": "append_task", "task": "optional"})
    assert made.status_code == 201, made.text
    arguments, idem = {"url": counter.url, "label": label()}, str(uuid.uuid4())
    params = {"name": "append_task", "arguments": arguments, "task": {"ttl": 60_000},
              "_meta": {META_KEY: idem}}  # fmt: skip
    created = [rpc(dev.url, alice, "tools/call", params)["result"]["task"] for _ in range(3)]
    assert len({task["taskId"] for task in created}) == 1, created
    task_id = created[0]["taskId"]
    done = rpc(dev.url, alice, "tasks/result", {"taskId": task_id})["result"]
    assert json.loads(done["content"][0]["text"])["run"] == 1, done
    again = rpc(dev.url, alice, "tools/call", params)["result"]["task"]
    assert again["taskId"] == task_id, again
    assert counter.runs(arguments["label"]) == 1


def test_a_modern_call_sent_again_with_its_key_is_answered_with_its_first_result(
    dev: DevServer, keys: tuple[str, str], counter: Tally
) -> None:
    alice, _ = keys
    arguments, idem = {"url": counter.url, "label": label()}, str(uuid.uuid4())
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "t"}, META_KEY: idem}  # fmt: skip
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "append_run", "arguments": arguments, "_meta": meta}}  # fmt: skip
    headers = {"Accept": "application/json, text/event-stream", "Authorization": f"Bearer {alice}",
               "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call",
               "Mcp-Name": "append_run"}  # fmt: skip
    answers = []
    for _ in range(3):
        sent = httpx.post(dev.url + "/mcp", json=body, headers=headers, timeout=60)
        assert sent.status_code == 200, sent.text
        answers.append(sent.json())
    assert [run_number(a) for a in answers] == [1, 1, 1], answers
    assert counter.runs(arguments["label"]) == 1


def stdio_call(state: Path, tools: Path, arguments: dict[str, Any], idem: str) -> dict[str, Any]:
    """One `kiln stdio` session (a process of its own) making one keyed call."""
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                       "clientInfo": {"name": "t", "version": "1"}}}  # fmt: skip
    params = {"name": "append_run", "arguments": arguments, "_meta": {META_KEY: idem}}
    lines = [init, {"jsonrpc": "2.0", "method": "notifications/initialized"},
             {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": params}]  # fmt: skip
    env = clean_env(KILN_RUN_TCP_PORTS="all")
    done = subprocess.run(
        [sys.executable, "-m", "kiln.cli", "stdio", "--no-examples", "--tools", str(tools),
         "--state-dir", str(state)],
        input="".join(json.dumps(line) + "\n" for line in lines).encode(),
        capture_output=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-3000:]
    replies = [json.loads(line) for line in done.stdout.splitlines()]
    return next(r for r in replies if r.get("id") == 2)


def test_kiln_stdio_answers_a_key_again_in_its_next_session(tmp_path: Path, counter: Tally) -> None:
    tools = tmp_path / "tools" / "append_run"
    tools.mkdir(parents=True)
    (tools / "main.py").write_text(TOOL["code"])
    manifest = {k: TOOL[k] for k in ("description", "input_schema", "annotations")}
    (tools / "tool.json").write_text(json.dumps(manifest))
    arguments, idem = {"url": counter.url, "label": label()}, str(uuid.uuid4())
    state = tmp_path / ".kiln"
    first = stdio_call(state, tools.parent, arguments, idem)
    again = stdio_call(state, tools.parent, arguments, idem)
    assert run_number(first) == 1, first
    assert result_of(again) == result_of(first)
    assert counter.runs(arguments["label"]) == 1


def kiln_cli(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = clean_env(KILN_URL=url, KILN_AUTHOR_KEY=DEV_KEY)
    return subprocess.run(
        [sys.executable, "-m", "kiln.cli", *args],
        env=env, capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip


def test_kiln_tools_call_sends_its_run_again_with_the_same_key_when_the_answer_is_cut(
    dev: DevServer, counter: Tally
) -> None:
    arguments = json.dumps({"url": counter.url, "label": (name := label())})
    with fault_proxy(dev.url) as proxy:
        proxy.lose_replies(1, b"/run", cut=True)  # the run happens; its answer breaks
        done = kiln_cli(proxy.url, "tools", "call", "append_run", "--args", arguments)
    assert done.returncode == 0, done.stderr
    assert "sending it again with the same idempotency key (2 of 3)" in done.stderr, done.stderr
    assert json.loads(done.stdout)["run"] == 1, done.stdout
    assert counter.runs(name) == 1, dev.log and dev.log.read_text()[-3000:]


def test_kiln_tools_call_with_a_key_is_answered_again_and_without_one_runs_each_time(
    dev: DevServer, counter: Tally
) -> None:
    arguments = json.dumps({"url": counter.url, "label": (name := label())})
    idem = str(uuid.uuid4())
    command = ("tools", "call", "append_run", "--args", arguments, "--idempotency-key", idem)
    keyed = [kiln_cli(dev.url, *command) for _ in range(2)]
    assert [k.returncode for k in keyed] == [0, 0], [k.stderr for k in keyed]
    assert keyed[0].stdout == keyed[1].stdout
    assert counter.runs(name) == 1
    fresh = kiln_cli(dev.url, "tools", "call", "append_run", "--args", arguments)
    assert json.loads(fresh.stdout)["run"] == 2, fresh.stderr
    other = kiln_cli(dev.url, "tools", "call", "append_run", "--args", "{}",
                     "--idempotency-key", idem)  # fmt: skip
    assert other.returncode == 1, other.stdout
    assert "HTTP 422" in other.stderr, other.stderr
    assert counter.runs(name) == 2
