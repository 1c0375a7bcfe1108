"""Tools that call tools over `kiln stdio` (issue 38), as a desktop client drives it: a real
process, JSON-RPC lines on its pipes, held open for the module.

On 2026-07-28 and on the 2025 wire: a tool that calls another, `execute` with the root catalog
in code mode (KILN_CATALOG_MODE), a call the tool did not declare or of a tool that does not
exist, an inner tool's own question asked through its outer call on the held 2025 call and
answered there (the inner tool runs once, and the time the person took is not the calls'
time); the count, time and depth bounds (KILN_CALL_COUNT=3, KILN_CALL_SECONDS set for the
process). Through `kiln stdio --url` to a `kiln dev` view (the local root catalog has no
approvals or quotas): a destructive inner call's approval held on the 2025 call, and inner
calls counted against the view's quota.
"""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from functional.local.test_inner_calls_on_dev import dev as dev
from functional.local.test_inner_calls_on_dev import rate_calls, text, tool, write_inner_tools
from functional.protocol.test_inner_calls import CALLER
from support.app import MODERN
from support.devserver import DevServer, clean_env

LEGACY = "2025-11-25"
WIRES = [LEGACY, MODERN]
COUNT = 3
SECONDS = 4.0
# Asks the user a name, and appends a line to a file per run past the question: how often it ran.
ASKER = """\
import json, os, sys
args = json.load(sys.stdin)
answers = json.loads(os.environ["KILN_ANSWERS"])
if "who" not in answers:
    talk = os.fdopen(int(os.environ["KILN_TALK_FD"]), "w")
    form = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
    ask = {"message": "Who is asking?", "requestedSchema": form}
    talk.write(json.dumps({"ask": "who", "elicitation": ask}))
    talk.close()
    sys.exit(0)
with open(args["ledger"], "a") as f:
    f.write("ran\\n")
print("hello " + answers["who"]["content"]["name"])
"""


class Stdio:
    """A `kiln stdio` process: requests written as lines, replies read by a thread."""

    def __init__(self, command: list[str], env: dict[str, str], stderr: Path) -> None:
        self.stderr_path = stderr
        self._err = stderr.open("wb")
        self.process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._err, env=env
        )
        self.lines: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._ids = iter(range(1, 1_000_000))
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            try:
                self.lines.put(json.loads(line))
            except ValueError:  # said as it is, for the failure to show
                self.lines.put({"not JSON": line.decode(errors="replace")})
        self.lines.put(None)

    def send(self, message: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(message).encode() + b"\n")
        self.process.stdin.flush()

    def next(self, timeout_s: float = 90.0) -> dict[str, Any]:
        try:
            line = self.lines.get(timeout=timeout_s)
        except queue.Empty:
            raise AssertionError(f"no line in {timeout_s:.0f} s; stderr:\n{self.tail()}") from None
        assert line is not None, f"kiln stdio ended; stderr:\n{self.tail()}"
        return line

    def exchange(
        self, method: str, params: dict[str, Any], answer: Callable[[Any], Any] | None = None
    ) -> dict[str, Any]:
        """Send a request and read until its reply (one request at a time); a request from
        the server on the way is answered with `answer(request)` (without one: a failure)."""
        rid = next(self._ids)
        self.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        while True:
            line = self.next()
            if line.get("id") == rid and "method" not in line:
                return line
            if "method" in line and "id" in line:
                assert answer is not None, f"an unexpected request from the server: {line}"
                self.send({"jsonrpc": "2.0", "id": line["id"], "result": answer(line)})

    def tail(self) -> str:
        self._err.flush()
        return self.stderr_path.read_text(errors="replace")[-3000:]

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._reader.join(timeout=10)
        assert self.process.stdout is not None
        self.process.stdout.close()
        self._err.close()


def initialize(server: Stdio) -> None:
    params = {"protocolVersion": LEGACY, "capabilities": {"elicitation": {}},
              "clientInfo": {"name": "inner-calls", "version": "1"}}  # fmt: skip
    reply = server.exchange("initialize", params)
    assert reply["result"]["protocolVersion"] == LEGACY, reply
    server.send({"jsonrpc": "2.0", "method": "notifications/initialized"})


@pytest.fixture(scope="module")
def tools(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("inner-stdio") / "tools"
    write_inner_tools(root)
    tool(root, "asker", ASKER)
    tool(root, "greet", CALLER, calls=["asker"])
    return root


def start(tools: Path, state: Path, **env: str) -> Stdio:
    command = [sys.executable, "-m", "kiln.cli", "stdio", "--no-examples", "--tools",
               str(tools), "--state-dir", str(state)]  # fmt: skip
    server = Stdio(command, clean_env(**env), state.parent / f"{state.name}.stderr")
    initialize(server)
    return server


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory every run may write (runs have their own uid and /tmp)."""
    place = tmp_path_factory.mktemp("runs-share")
    place.chmod(0o1777)
    return place


@pytest.fixture(scope="module")
def listing(tools: Path, shared: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stdio]:
    """The root catalog in list mode, at most 3 inner calls per call."""
    server = start(tools, tmp_path_factory.mktemp("list") / "state", KILN_CALL_COUNT=str(COUNT),
                   KILN_RUN_SHARED_DIRS=str(shared))  # fmt: skip
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="module")
def coding(tools: Path, shared: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stdio]:
    """The root catalog in code mode, its calls' tree bounded to a few seconds."""
    server = start(tools, tmp_path_factory.mktemp("code") / "state", KILN_CATALOG_MODE="code",
                   KILN_CALL_SECONDS=str(SECONDS), KILN_RUN_SHARED_DIRS=str(shared))  # fmt: skip
    try:
        yield server
    finally:
        server.close()


def call(
    server: Stdio,
    name: str,
    arguments: dict[str, Any],
    wire: str,
    answer: Callable[[Any], Any] | None = None,
) -> Any:
    """A tools/call on `wire`, its result; questions of the server answered by `answer`."""
    params: dict[str, Any] = {"name": name, "arguments": arguments}
    if wire == MODERN:
        params["_meta"] = {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}},
            "io.modelcontextprotocol/clientInfo": {"name": "inner-calls"},
        }
    reply = server.exchange("tools/call", params, answer)
    assert "result" in reply, f"{reply}\nstderr:\n{server.tail()}"
    return reply["result"]


def printed(server: Stdio, result: dict[str, Any]) -> dict[str, Any]:
    assert result.get("isError") is not True, f"{result}\nstderr:\n{server.tail()}"
    return dict(json.loads(text(result)))


@pytest.mark.parametrize("wire", WIRES)
def test_a_tool_that_calls_a_tool_answers_over_stdio(listing: Stdio, wire: str) -> None:
    body = printed(listing, call(listing, "convert", {"calls": rate_calls("GBP", "EUR")}, wire))
    assert [a["structuredContent"] for a in body["got"]] == [{"rate": 1.25}, {"rate": 1.1}]


@pytest.mark.parametrize("wire", WIRES)
def test_a_call_not_declared_or_of_no_tool_is_refused_over_stdio(listing: Stdio, wire: str) -> None:
    calls = [{"name": "nosuch", "arguments": {}}, {"name": "asker", "arguments": {}}]
    body = printed(listing, call(listing, "convert", {"calls": calls, "together": True}, wire))
    unknown, undeclared = body["got"]
    assert text(unknown) == "The call of 'nosuch' was refused: Unknown tool: nosuch"
    assert text(undeclared).startswith("Tool 'convert' may not call 'asker'"), undeclared


def test_the_fourth_and_fifth_of_five_calls_are_refused_at_the_count_bound(
    listing: Stdio,
) -> None:
    body = printed(
        listing,
        call(listing, "convert", {"calls": rate_calls("GBP", "EUR", "GBP", "EUR", "GBP")}, MODERN),
    )
    answers = body["got"]
    assert [a["isError"] for a in answers] == [False, False, False, True, True], answers
    for refused in answers[3:]:
        assert text(refused) == (
            "The call of 'fx_rate' was not made: one call may make at most 3 inner calls, "
            "and this one's have all been made (convert → fx_rate)"
        )


def test_an_inner_tools_question_is_asked_on_the_held_2025_call_and_it_runs_once(
    listing: Stdio, shared: Path
) -> None:
    ran = shared / "asker-ran.txt"
    asked: list[dict[str, Any]] = []

    def answer(request: dict[str, Any]) -> dict[str, Any]:
        asked.append(request)
        return {"action": "accept", "content": {"name": "Ada"}}

    calls = [{"name": "asker", "arguments": {"ledger": str(ran)}}]
    body = printed(listing, call(listing, "greet", {"calls": calls}, LEGACY, answer=answer))
    (got,) = body["got"]
    assert text(got).strip() == "hello Ada", got
    (question,) = asked
    assert question["method"] == "elicitation/create"
    assert question["params"]["message"] == "Tool 'greet' calls 'asker'.\nWho is asking?"
    assert ran.read_text() == "ran\n"  # once: not again for the outer call's last run


@pytest.mark.parametrize("wire", WIRES)
def test_execute_answers_over_stdio_in_code_mode(coding: Stdio, wire: str) -> None:
    listed = coding.exchange("tools/list", {})
    (execute,) = listed["result"]["tools"]  # a catalog this small: execute alone, which
    assert execute["name"] == "execute"  # names every function in its description
    assert "fx_rate(" in execute["description"], execute
    code = "print(fx_rate(from_='GBP')['rate'] * 4)\n"
    result = call(coding, "execute", {"code": code}, wire)
    assert result.get("isError") is not True, f"{result}\nstderr:\n{coding.tail()}"
    assert text(result).strip() == "5.0"


def test_a_call_whose_inner_calls_spent_the_time_bound_ends_saying_so(coding: Stdio) -> None:
    """The first inner call sleeps far past KILN_CALL_SECONDS: it is stopped at the bound, and
    the call ends with an error naming the bound and the chain (it said "no time was left in
    the invocation", which was not so: the request had time; its calls' bound was spent)."""
    code = "slow()\nprint('after the slow call')\n"
    result = call(coding, "execute", {"code": code}, MODERN)
    assert result["isError"] is True, result
    said = text(result)
    assert "after the slow call" not in said
    assert said == (
        "Tool 'execute' was not run again with its calls' answers: the inner calls of one call "
        f"may take at most {SECONDS:g} s (or the time the request has left), and that is spent "
        "(execute)"
    ), said


@pytest.fixture(scope="module")
def bridged(dev: DevServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stdio]:
    """`kiln stdio --url` to the team view of a `kiln dev` (its confirm: destructive)."""
    where = tmp_path_factory.mktemp("bridge")
    command = [sys.executable, "-m", "kiln.cli", "stdio", "--url", f"{dev.url}/mcp/v/team"]
    server = Stdio(command, clean_env(), where / "bridge.stderr")
    initialize(server)
    try:
        yield server
    finally:
        server.close()


def test_a_destructive_inner_calls_approval_is_asked_on_the_held_2025_call_and_it_runs_once(
    bridged: Stdio, dev: DevServer
) -> None:
    asked: list[dict[str, Any]] = []

    def approve(request: dict[str, Any]) -> dict[str, Any]:
        asked.append(request)
        return {"action": "accept", "content": {"approve": True}}

    calls = [{"name": "wipe", "arguments": {"target": "db"}}]
    body = printed(bridged, call(bridged, "convert", {"calls": calls}, LEGACY, answer=approve))
    (got,) = body["got"]
    assert text(got).strip() == "wiped db", got
    (question,) = asked
    assert question["method"] == "elicitation/create"
    assert question["params"]["message"].startswith("Tool 'convert' calls 'wipe'.\nAllow the tool")
    runs = dev.api("GET", "/api/calls", params={"tool": "wipe", "limit": "50"}).json()["calls"]
    assert [(e["outcome"], e["detail"][:11]) for e in runs] == [("ok", "approved by")], runs


def test_time_waiting_for_the_client_is_not_the_inner_calls_time(
    coding: Stdio, shared: Path
) -> None:
    """On the held 2025 call the person answers after the calls' bound has passed: the
    waiting is not the calls' time (the request's own time still bounds it), so the inner
    call runs with the answer."""
    ran = shared / "asker-ran-late.txt"

    def late(request: dict[str, Any]) -> dict[str, Any]:
        time.sleep(SECONDS + 1)  # a person taking longer than the calls' bound
        return {"action": "accept", "content": {"name": "Ada"}}

    code = f"print(asker(ledger={str(ran)!r}))\n"
    result = call(coding, "execute", {"code": code}, LEGACY, answer=late)
    assert result.get("isError") is not True, f"{result}\nstderr:\n{coding.tail()}"
    assert text(result).strip() == "hello Ada"
    assert ran.read_text() == "ran\n"


def test_execute_recursing_through_calls_ends_at_the_depth_bound_over_stdio(
    coding: Stdio,
) -> None:
    code = "try:\n    ping(to='pong')\nexcept ToolCallError as error:\n    print(error)\n"
    said = text(call(coding, "execute", {"code": code}, MODERN))
    assert "calls nest at most 4 deep (execute → ping → pong → ping → pong → ping)" in said, said


def test_inner_calls_count_against_a_views_quota_over_stdio(dev: DevServer, tmp_path: Path) -> None:
    """`kiln stdio --url` to the metered view (3 calls a minute): a direct call, then a tool
    whose second inner call is the 4th: refused; then a direct call is refused."""
    command = [sys.executable, "-m", "kiln.cli", "stdio", "--url", f"{dev.url}/mcp/v/metered"]
    server = Stdio(command, clean_env(), tmp_path / "bridge.stderr")
    try:
        initialize(server)
        assert printed(server, call(server, "fx_rate", {"from": "GBP"}, LEGACY)) == {"rate": 1.25}
        body = printed(server, call(server, "convert", {"calls": rate_calls("GBP", "EUR")}, LEGACY))
        first, second = body["got"]
        assert first["isError"] is False, first
        assert text(second).startswith("The call of 'fx_rate' was refused: "), second
        assert "3 calls per minute" in text(second), second
        reply = server.exchange("tools/call", {"name": "fx_rate", "arguments": {"from": "EUR"}})
        assert reply["error"]["code"] == -32029, reply
    finally:
        server.close()
