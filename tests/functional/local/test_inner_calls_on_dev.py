"""Tools that call tools on `kiln dev` as a real process (issue 38): both wires, code mode.

One `kiln dev` for the module, its tools and views pushed from folders as an author writes
them (`--tools`): a tool that calls another, `execute` in a code-mode view, a call outside
the caller's view, the depth bound (a cycle of two tools, and `execute` going through it), a
view's quota that inner calls count against, and `kiln stdio --url` bridged to a view where a
destructive inner call's approval is asked on the held 2025 call and answered there.
The in-process app path is `tests/functional/protocol/test_inner_calls.py`; limits of count
and time (set per process) are in `test_inner_calls_over_stdio.py`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from functional.protocol.test_inner_calls import CALLER, PING, RATE, WIPE
from support.app import MODERN
from support.devserver import DevServer, kiln_dev

WIRES = ["legacy", "modern"]
OPEN = {"type": "object", "additionalProperties": True}
SAFE = {"readOnlyHint": False, "destructiveHint": False}  # MCP's default is destructive
RATE_SCHEMA = {
    "type": "object",
    "properties": {"from": {"type": "string", "enum": ["GBP", "EUR"]}},
    "required": ["from"],
}
RATE_OUT = {"type": "object", "properties": {"rate": {"type": "number"}}, "required": ["rate"]}
# Sleeps far past any bound a test sets (the run is killed at the tree's time bound).
SLOW = "import time\ntime.sleep(600)\nprint('slept')\n"
BIG = "import json, sys\nprint('x' * json.load(sys.stdin)['n'])\n"  # n bytes of output
QUOTA = 3  # the metered view's calls per minute


def tool(root: Path, name: str, code: str, **manifest: Any) -> None:
    folder = root / name
    folder.mkdir(parents=True)
    fields = {"description": f"{name}, for inner calls.", "input_schema": OPEN,
              "annotations": SAFE, **manifest}  # fmt: skip
    (folder / "tool.json").write_text(json.dumps(fields))
    (folder / "main.py").write_text(code)


def write_inner_tools(root: Path) -> None:
    """The tools and views every path's tests share (the view files beside the folders)."""
    tool(root, "fx_rate", RATE, input_schema=RATE_SCHEMA, output_schema=RATE_OUT,
         description="An exchange rate to USD.")  # fmt: skip
    tool(root, "convert", CALLER, calls=["fx_rate", "wipe", "hidden", "slow", "nosuch", "big"])
    tool(root, "ping", PING, calls=["pong"])
    tool(root, "pong", PING, calls=["ping"])
    tool(root, "hidden", "print('hidden ran')\n", description="Not in any view.")
    tool(root, "wipe", WIPE, annotations={"destructiveHint": True, "readOnlyHint": False})
    tool(root, "slow", SLOW)
    tool(root, "big", BIG)
    views = {
        "team": {"tools": ["fx_rate", "convert", "ping", "pong", "wipe", "slow", "big"],
                 "confirm": "destructive"},
        "coder": {"tools": ["fx_rate", "wipe", "ping", "pong"], "mode": "code",
                  "confirm": "destructive"},
        "metered": {"tools": ["fx_rate", "convert"], "quota": {"calls_per_minute": QUOTA}},
    }  # fmt: skip
    for name, view in views.items():
        body = {**view, "published": True, "anonymous": True}
        (root / f"{name}.view.json").write_text(json.dumps(body))


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    root = tmp_path_factory.mktemp("inner-dev")
    write_inner_tools(root / "tools")
    with kiln_dev(root / "state", "--no-examples", "--tools", str(root / "tools")) as server:
        yield server


def result_of(dev: DevServer, response: httpx.Response) -> dict[str, Any]:
    """The call's result, from a JSON body or the last event of a stream; on anything else,
    the body and the server's log tail."""
    assert response.status_code == 200, f"{response.text}\n--- log:\n{log_tail(dev)}"
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        events = [line[6:] for line in response.text.splitlines() if line.startswith("data: ")]
        body = json.loads(events[-1])
    else:
        body = response.json()
    assert "result" in body, f"{body}\n--- log:\n{log_tail(dev)}"
    return dict(body["result"])


def log_tail(dev: DevServer) -> str:
    return dev.log.read_text(errors="replace")[-3000:] if dev.log else "(no log)"


def call(
    dev: DevServer, name: str, arguments: dict[str, Any], *, wire: str, view: str = "team"
) -> dict[str, Any]:
    params = {"name": name, "arguments": arguments}
    return result_of(dev, dev.mcp("tools/call", params, wire=wire, path=f"/mcp/v/{view}"))


def text(result: dict[str, Any]) -> str:
    return "\n".join(c.get("text", "") for c in result["content"])


def printed(result: dict[str, Any]) -> dict[str, Any]:
    assert result.get("isError") is not True, result
    return dict(json.loads(text(result)))


def rate_calls(*currencies: str) -> list[dict[str, Any]]:
    return [{"name": "fx_rate", "arguments": {"from": c}} for c in currencies]


def ledger(dev: DevServer, tool_name: str) -> list[dict[str, Any]]:
    found = dev.api("GET", "/api/calls", params={"tool": tool_name, "limit": "200"})
    assert found.status_code == 200, found.text
    return list(found.json()["calls"])


@pytest.mark.parametrize("wire", WIRES)
def test_a_tool_that_calls_a_tool_answers_on_kiln_dev(dev: DevServer, wire: str) -> None:
    body = printed(call(dev, "convert", {"calls": rate_calls("GBP", "EUR")}, wire=wire))
    assert [a["structuredContent"] for a in body["got"]] == [{"rate": 1.25}, {"rate": 1.1}]
    assert [a["isError"] for a in body["got"]] == [False, False]


@pytest.mark.parametrize("wire", WIRES)
def test_execute_in_a_code_view_answers_on_kiln_dev(dev: DevServer, wire: str) -> None:
    listed = dev.mcp("tools/list", wire=wire, path="/mcp/v/coder")
    # A code view of at most 20 tools lists execute alone, its functions in its description.
    assert {t["name"] for t in listed.json()["result"]["tools"]} == {"execute"}
    code = "g = fx_rate(from_='GBP')['rate']\ne = fx_rate(from_='EUR')['rate']\nprint(g + e)\n"
    result = call(dev, "execute", {"code": code}, wire=wire, view="coder")
    assert result.get("isError") is not True, f"{result}\n--- log:\n{log_tail(dev)}"
    assert text(result).strip() == "2.35"


@pytest.mark.parametrize("wire", WIRES)
def test_an_inner_call_outside_the_view_is_refused_on_kiln_dev(dev: DevServer, wire: str) -> None:
    """`hidden` is declared by `convert` but in no view: unknown to this caller, not run."""
    before = len(ledger(dev, "hidden"))
    calls = [{"name": "hidden", "arguments": {}}]
    (answer,) = printed(call(dev, "convert", {"calls": calls}, wire=wire))["got"]
    assert answer["isError"] is True
    assert text(answer) == "The call of 'hidden' was refused: Unknown tool: hidden"
    # Code mode: no function for it in the code's globals, and a raw ask is refused too.
    named = call(dev, "execute", {"code": "hidden()\n"}, wire=wire, view="coder")
    assert named["isError"] is True
    assert "NameError: name 'hidden' is not defined" in text(named), named
    raw = call(dev, "execute", {"code": raw_ask("hidden")}, wire=wire, view="coder")
    assert "Tool 'execute' may not call 'hidden'" in text(raw), raw
    assert len(ledger(dev, "hidden")) == before  # never reached the gate's run


def raw_ask(name: str, arguments: dict[str, Any] | None = None) -> str:
    """Code that writes a call ask on the talk channel itself, then prints its answer."""
    ask = json.dumps({"ask": "x", "call": {"name": name, "arguments": arguments or {}}})
    return (
        "import json, os\n"
        "answers = json.loads(os.environ['KILN_ANSWERS'])\n"
        "if 'x' not in answers:\n"
        "    talk = os.fdopen(int(os.environ['KILN_TALK_FD']), 'w')\n"
        f"    talk.write({ask!r})\n"
        "    talk.close()\n"
        "    raise SystemExit(0)\n"
        "print(json.dumps(answers['x']))\n"
    )


def test_execute_cannot_call_execute_through_the_talk_channel(dev: DevServer) -> None:
    result = call(dev, "execute", {"code": raw_ask("execute", {"code": "print(1)"})},
                  wire="modern", view="coder")  # fmt: skip
    answer = json.loads(text(result))
    assert answer["isError"] is True
    assert text(answer).startswith("Tool 'execute' may not call 'execute'"), answer


def test_a_cycle_ends_at_the_depth_bound_on_kiln_dev(dev: DevServer) -> None:
    result = call(dev, "ping", {"to": "pong"}, wire="modern")
    assert result["isError"] is True
    assert "calls nest at most 4 deep (ping → pong → ping → pong → ping → pong)" in text(result)


def test_execute_recursing_through_calls_ends_at_the_depth_bound(dev: DevServer) -> None:
    """Code whose call calls a tool that calls back, and so on: the bound ends the tree, and
    the code gets the chain as its call's error."""
    code = (
        "try:\n    ping(to='pong')\nexcept ToolCallError as error:\n    print('refused:', error)\n"
    )
    result = call(dev, "execute", {"code": code}, wire="modern", view="coder")
    said = text(result)
    assert said.startswith("refused:"), f"{result}\n--- log:\n{log_tail(dev)}"
    assert "calls nest at most 4 deep (execute → ping → pong → ping → pong → ping)" in said


def test_inner_calls_count_against_the_views_quota(dev: DevServer) -> None:
    """The metered view allows 3 calls a minute: one direct call, then a tool whose two
    inner calls are the 3rd and 4th: the 4th is refused; then a direct call is refused."""
    assert printed(call(dev, "fx_rate", {"from": "GBP"}, wire="modern", view="metered")) == {
        "rate": 1.25
    }
    body = printed(call(dev, "convert", {"calls": rate_calls("GBP", "EUR")}, wire="modern",
                        view="metered"))  # fmt: skip
    first, second = body["got"]
    assert first["isError"] is False, first
    assert second["isError"] is True, second
    assert text(second).startswith("The call of 'fx_rate' was refused: "), second
    assert f"{QUOTA} calls per minute" in text(second), second
    direct = dev.mcp("tools/call", {"name": "fx_rate", "arguments": {"from": "EUR"}},
                     wire="modern", path="/mcp/v/metered")  # fmt: skip
    assert direct.status_code == 429, direct.text
    assert direct.json()["error"]["code"] == -32029
    seen = [(e["view"], e["outcome"]) for e in ledger(dev, "fx_rate") if e["view"] == "metered"]
    assert sorted(seen) == [("metered", "ok"), ("metered", "ok"), ("metered", "refused"),
                            ("metered", "refused")], seen  # fmt: skip


def test_a_loop_of_calls_in_execute_ends_at_the_count_bound(dev: DevServer) -> None:
    """Code that calls a tool forever: the 33rd call is refused (KILN_CALL_COUNT, 32)."""
    code = (
        "n = 0\n"
        "try:\n"
        "    while True:\n"
        "        fx_rate(from_='GBP')\n"
        "        n += 1\n"
        "except ToolCallError as error:\n"
        "    print(n, error)\n"
    )
    said = text(call(dev, "execute", {"code": code}, wire="modern", view="coder"))
    assert said.startswith(
        "32 The call of 'fx_rate' was not made: one call may make at most 32 inner calls"
    ), said


def modern_call(dev: DevServer, view: str, name: str, **params: Any) -> dict[str, Any]:
    """A 2026-07-28 tools/call from a client that answers elicitations."""
    meta = {"io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}},
            "io.modelcontextprotocol/clientInfo": {"name": "inner-calls"}}  # fmt: skip
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
               "params": {"name": name, **params, "_meta": meta}}  # fmt: skip
    headers = {"Accept": "application/json", "MCP-Protocol-Version": MODERN,
               "Mcp-Method": "tools/call", "Mcp-Name": name}  # fmt: skip
    return result_of(dev, dev.http.post(f"{dev.url}/mcp/v/{view}", json=message, headers=headers))


def test_execute_asks_for_a_destructive_calls_approval_and_runs_it_once(dev: DevServer) -> None:
    before = len(ledger(dev, "wipe"))
    arguments = {"code": "print(wipe(target='cache'))\n"}
    first = modern_call(dev, "coder", "execute", arguments=arguments)
    assert first.get("resultType") == "input_required", first
    (key,) = first["inputRequests"]
    assert key.startswith("kiln/call/"), key
    assert key.endswith("/kiln/approval"), key
    message = first["inputRequests"][key]["params"]["message"]
    assert message.startswith("Tool 'execute' calls 'wipe'.\n"), message
    accept = {key: {"action": "accept", "content": {"approve": True}}}
    done = modern_call(dev, "coder", "execute", arguments=arguments, inputResponses=accept,
                       requestState=first["requestState"])  # fmt: skip
    assert text(done).strip() == "wiped cache", done
    after = ledger(dev, "wipe")  # newest first
    assert [e["outcome"] for e in after[: len(after) - before]] == ["ok"], after


def test_answers_past_one_lambda_invocation_end_the_call_on_kiln_dev_too(dev: DevServer) -> None:
    """Every answer so far travels with each run of the outer tool; on AWS seven inner
    results of 1 MB do not fit in the runner function's 6 MB invoke. kiln dev is not more
    lenient: the call ends here with the same error (it ran, and failed only on AWS)."""
    calls = [{"name": "big", "arguments": {"n": 1_000_000}}] * 7
    result = call(dev, "convert", {"calls": calls}, wire="modern")
    assert result["isError"] is True, str(result)[:2000]
    said = text(result)
    assert "[runner error] the run does not fit in one invocation of the runner function (" in (
        said
    ), said[:2000]
    assert "bytes of code, files, arguments and answers so far" in said, said[:2000]
