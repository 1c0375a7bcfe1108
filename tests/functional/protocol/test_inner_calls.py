"""Tools that call tools (kiln/protocol/inner.py): a script's `call` ask is answered by Kiln,
as the same caller and through the same gate as a direct call, and the script runs again.

Real HTTP into kiln dev's app on the moto emulator, real scripts that write raw talk lines (the
helper module shipped with every run is tested apart), the ledger read back over REST.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.app import META_CAPS, McpServer, meta, start_kiln, write_tool

# A script that asks for the calls its arguments list (one round each, in order, or all at
# once with "together"), then prints what it got: the shape every caller below shares.
CALLER = """\
import json, os, sys
args = json.load(sys.stdin)
answers = json.loads(os.environ["KILN_ANSWERS"])
calls = args.get("calls", [])
todo = [(f"c{i}", c) for i, c in enumerate(calls) if f"c{i}" not in answers]
if todo:
    talk = os.fdopen(int(os.environ["KILN_TALK_FD"]), "w")
    for key, c in (todo if args.get("together") else todo[:1]):
        talk.write(json.dumps({"ask": key, "call": c}) + "\\n")
    talk.close()
    sys.exit(0)
got = [answers[f"c{i}"] for i in range(len(calls))]
print(json.dumps({"got": got, "calls": json.loads(os.environ["KILN_CALLS"])}))
"""

RATE = """\
import json, sys
args = json.load(sys.stdin)
print(json.dumps({"rate": {"GBP": 1.25, "EUR": 1.1}[args["from"]]}))
"""

# Calls the tool its argument names, telling it to call this one back: a cycle of two
# tools that call each other until the depth bound refuses the next call.
PING = """\
import json, os, sys
args = json.load(sys.stdin)
answers = json.loads(os.environ["KILN_ANSWERS"])
if "next" not in answers:
    talk = os.fdopen(int(os.environ["KILN_TALK_FD"]), "w")
    onward = {"to": {"ping": "pong", "pong": "ping"}[args["to"]]}
    talk.write(json.dumps({"ask": "next", "call": {"name": args["to"], "arguments": onward}}))
    talk.close()
    sys.exit(0)
answer = answers["next"]
if answer.get("isError"):
    print(answer["content"][0]["text"], file=sys.stderr)
    sys.exit(3)
print(answer["content"][0]["text"])
"""

WIPE = 'import json, sys\nprint("wiped " + json.load(sys.stdin)["target"])\n'
OPEN = {"type": "object", "additionalProperties": True}
SAFE = {"readOnlyHint": False, "destructiveHint": False}  # MCP's default is destructive


def _manifest(description: str, calls: list[str], **more: Any) -> dict[str, Any]:
    return {
        "description": description, "input_schema": OPEN, "calls": calls, "annotations": SAFE,
        **more,
    }  # fmt: skip


@pytest.fixture(scope="module")
def server(moto_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[McpServer]:
    tmp: Path = tmp_path_factory.mktemp("inner")
    root = tmp / "tools"
    rate_schema = {
        "type": "object",
        "properties": {"from": {"type": "string", "enum": ["GBP", "EUR"]}},
        "required": ["from"],
    }
    out = {"type": "object", "properties": {"rate": {"type": "number"}}, "required": ["rate"]}
    destructive = {"destructiveHint": True, "readOnlyHint": False}
    tools = [
        write_tool(root, "fx_rate", {"description": "An exchange rate to USD.",
                   "input_schema": rate_schema, "output_schema": out, "annotations": SAFE}, RATE),
        write_tool(root, "convert", _manifest("Calls fx_rate.", ["fx_rate", "wipe", "hidden"]),
                   CALLER),
        write_tool(root, "rogue", _manifest("Declares nothing.", []), CALLER),
        write_tool(root, "ping", _manifest("Calls pong.", ["pong"]), PING),
        write_tool(root, "pong", _manifest("Calls ping.", ["ping"]), PING),
        write_tool(root, "hidden", _manifest("Not in the view.", []),
                   'print("hidden ran")\n'),
        write_tool(root, "wipe", {"description": "Wipes.", "input_schema": OPEN,
                   "annotations": destructive}, WIPE),
    ]  # fmt: skip
    for running in start_kiln(moto_endpoint, tmp, extra=tools):
        view = {
            "tools": ["fx_rate", "convert", "rogue", "ping", "pong", "wipe"],
            "published": True,
            "anonymous": True,
            "confirm": "destructive",
        }
        made = running.running.api("PUT", "/api/views/team", json=view)
        assert made.status_code in (200, 201), made.text
        code = {**view, "tools": ["fx_rate", "wipe", "ping", "pong"], "mode": "code"}
        made = running.running.api("PUT", "/api/views/coder", json=code)
        assert made.status_code in (200, 201), made.text
        yield running


def call(
    server: McpServer, name: str, arguments: dict[str, Any], *, path: str = "/mcp/v/team", **more
) -> dict[str, Any]:
    """A 2026-07-28 tools/call from a client that answers elicitations."""
    params = {"name": name, "arguments": arguments, **more}
    params["_meta"] = {**meta(), META_CAPS: {"elicitation": {}}}
    response = server.modern("tools/call", params, path=path)
    assert response.status_code == 200, response.text
    body = response.json()
    assert "result" in body, body
    return dict(body["result"])


def printed(result: dict[str, Any]) -> dict[str, Any]:
    assert result.get("isError") is not True, result
    return dict(json.loads(result["content"][0]["text"]))


def ledger(server: McpServer, **params: str) -> list[dict[str, Any]]:
    found = server.running.api("GET", "/api/calls", params={"limit": "200", **params})
    assert found.status_code == 200, found.text
    return list(found.json()["calls"])


def test_a_script_calls_a_tool_and_gets_its_structured_result(server: McpServer) -> None:
    calls = [{"name": "fx_rate", "arguments": {"from": "GBP"}}]
    body = printed(call(server, "convert", {"calls": calls}))
    (answer,) = body["got"]
    assert answer["isError"] is False
    assert answer["structuredContent"] == {"rate": 1.25}
    assert body["calls"] == ["fx_rate", "wipe", "hidden"]  # KILN_CALLS: what it declared


def test_calls_asked_together_are_made_in_one_round(server: McpServer) -> None:
    calls = [{"name": "fx_rate", "arguments": {"from": f}} for f in ("GBP", "EUR")]
    body = printed(call(server, "convert", {"calls": calls, "together": True}))
    assert [a["structuredContent"]["rate"] for a in body["got"]] == [1.25, 1.1]


def test_inner_arguments_are_checked_against_the_inner_tools_schema(server: McpServer) -> None:
    calls = [{"name": "fx_rate", "arguments": {"from": "XYZ"}}]
    (answer,) = printed(call(server, "convert", {"calls": calls}))["got"]
    assert answer["isError"] is True
    assert "Invalid arguments for tool 'fx_rate'" in answer["content"][0]["text"]


def test_a_tool_calls_only_what_it_declares(server: McpServer) -> None:
    calls = [{"name": "fx_rate", "arguments": {"from": "GBP"}}]
    (answer,) = printed(call(server, "rogue", {"calls": calls}))["got"]
    assert answer["isError"] is True
    text = answer["content"][0]["text"]
    assert "Tool 'rogue' may not call 'fx_rate'" in text
    assert "(it names: none)" in text


def test_an_inner_call_outside_the_callers_view_is_refused(server: McpServer) -> None:
    calls = [{"name": "hidden", "arguments": {}}]
    (answer,) = printed(call(server, "convert", {"calls": calls}))["got"]
    assert answer["isError"] is True
    assert answer["content"][0]["text"] == "The call of 'hidden' was refused: Unknown tool: hidden"


def test_a_cycle_ends_at_the_depth_bound_with_the_chain(server: McpServer) -> None:
    result = call(server, "ping", {"to": "pong"})
    assert result["isError"] is True
    text = result["content"][0]["text"]
    assert "calls nest at most 4 deep (ping → pong → ping → pong → ping → pong)" in text, text


def test_the_ledger_links_each_inner_call_to_its_parent(server: McpServer) -> None:
    calls = [{"name": "fx_rate", "arguments": {"from": f}} for f in ("GBP", "EUR")]
    printed(call(server, "convert", {"calls": calls, "together": True}))
    outer = ledger(server, tool="convert")[0]
    inner = [e for e in ledger(server, tool="fx_rate") if e.get("parent") == outer["id"]]
    assert len(inner) == 2, (outer, ledger(server, tool="fx_rate")[:4])
    assert {e["outcome"] for e in inner} == {"ok"}
    assert all(e["view"] == "team" and e["caller"] == outer["caller"] for e in inner)


def test_a_destructive_inner_call_asks_for_approval_through_the_outer_call(
    server: McpServer,
) -> None:
    calls = [{"name": "wipe", "arguments": {"target": "db"}}]
    first = call(server, "convert", {"calls": calls})
    assert first["resultType"] == "input_required", first
    (key,) = first["inputRequests"]
    assert key == "kiln/call/c0/kiln/approval"
    message = first["inputRequests"][key]["params"]["message"]
    assert message.startswith("Tool 'convert' calls 'wipe'.\n"), message
    accept = {key: {"action": "accept", "content": {"approve": True}}}
    done = call(
        server, "convert", {"calls": calls},
        inputResponses=accept, requestState=first["requestState"],
    )  # fmt: skip
    (answer,) = printed(done)["got"]
    assert answer["content"][0]["text"] == "wiped db"
    # The same state and answer sent again do not run it again: the approval is spent.
    again = call(
        server, "convert", {"calls": calls},
        inputResponses=accept, requestState=first["requestState"],
    )  # fmt: skip
    assert again.get("resultType") == "input_required", again
    assert "already used" in again["inputRequests"][key]["params"]["message"]


def execute(server: McpServer, code: str, language: str | None = None) -> dict[str, Any]:
    arguments = {"code": code} if language is None else {"code": code, "language": language}
    return call(server, "execute", arguments, path="/mcp/v/coder")


def test_a_small_code_view_lists_execute_alone_with_every_function(server: McpServer) -> None:
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": meta()}}
    headers = {"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/list"}
    listed = server.http.post(f"{server.running.url}/mcp/v/coder", json=message, headers=headers)
    assert listed.status_code == 200, listed.text
    (execute,) = listed.json()["result"]["tools"]
    assert execute["name"] == "execute"
    text = execute["description"]
    assert "fx_rate(from_: Literal['GBP', 'EUR']) -> {'rate': float}  # An exchange rate" in text
    assert "wipe(" in text
    assert "call_tool" not in text  # nothing points at a tool this mode lacks
    # search_tools and describe_tools still answer, unlisted.
    described = call(server, "describe_tools", {"names": ["fx_rate"]}, path="/mcp/v/coder")
    assert '"name":"fx_rate"' in described["content"][0]["text"], described


def test_execute_runs_code_whose_tool_calls_go_through_the_gate(server: McpServer) -> None:
    code = (
        "gbp = fx_rate(from_='GBP')['rate']\n"
        "eur = fx_rate(from_='EUR')['rate']\n"
        "print(f'{100 * gbp:.2f} USD, {100 * eur:.2f} USD')\n"
    )
    result = execute(server, code)
    assert result.get("isError") is not True, result
    assert result["content"][0]["text"].strip() == "125.00 USD, 110.00 USD"
    outer = ledger(server, tool="execute")[0]
    assert outer["view"] == "coder"
    children = [e for e in ledger(server, tool="fx_rate") if e.get("parent") == outer["id"]]
    assert len(children) == 2, children


def test_execute_reaches_only_the_views_tools(server: McpServer) -> None:
    code = (
        "import json, os\n"
        "talk = os.fdopen(int(os.environ['KILN_TALK_FD']), 'w')\n"
        "answers = json.loads(os.environ['KILN_ANSWERS'])\n"
        "if 'x' not in answers:\n"
        "    talk.write(json.dumps({'ask': 'x', 'call': {'name': 'convert', 'arguments': {}}}))\n"
        "    talk.close()\n"
        "    raise SystemExit(0)\n"
        "print(answers['x']['content'][0]['text'])\n"
    )
    result = execute(server, code)
    assert "Tool 'execute' may not call 'convert'" in result["content"][0]["text"], result


# Three calls, a question to the user, then three more: the count bound (4) holds across the
# client's round (the state carries the calls made), so the fifth and sixth are refused.
COUNTED = """\
import json, os, sys
from kiln_tools import ToolCallError, tools
first = tools.gather(*[("fx_rate", {"from": "GBP"})] * 3)
if "go" not in json.loads(os.environ["KILN_ANSWERS"]):
    with os.fdopen(int(os.environ["KILN_TALK_FD"]), "w") as talk:
        ask = {"message": "Go on?", "requestedSchema": {"type": "object", "properties": {}}}
        talk.write(json.dumps({"ask": "go", "elicitation": ask}))
    sys.exit(0)
try:
    tools.gather(*[("fx_rate", {"from": "EUR"})] * 3)
except ToolCallError as error:
    print("refused:", error)
else:
    print("all six made")
"""


@pytest.fixture(scope="module")
def counted(moto_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[McpServer]:
    tmp: Path = tmp_path_factory.mktemp("counted")
    rate = {"description": "A rate.", "input_schema": OPEN, "annotations": SAFE}
    tools = [
        write_tool(tmp / "tools", "fx_rate", rate, 'print("1.5")\n'),
        write_tool(tmp / "tools", "counted", _manifest("Calls six times.", ["fx_rate"]), COUNTED),
    ]
    yield from start_kiln(moto_endpoint, tmp, extra=tools, call_count=4)


def test_the_count_bound_holds_across_the_clients_round_on_2026_07_28(counted: McpServer) -> None:
    first = call(counted, "counted", {}, path="/mcp")
    assert first["resultType"] == "input_required", first
    go = {"go": {"action": "accept", "content": {}}}
    done = call(
        counted, "counted", {}, path="/mcp", inputResponses=go, requestState=first["requestState"]
    )
    text = done["content"][0]["text"]
    assert text.startswith(
        "refused: The call of 'fx_rate' was not made: one call may make at most 4"
    ), done


def test_execute_runs_javascript_with_the_same_functions_through_the_gate(
    server: McpServer,
) -> None:
    code = (
        "const gbp = fx_rate({from: 'GBP'}).rate;\n"
        "const [eur] = tools.gather([['fx_rate', {from: 'EUR'}]]);\n"
        "console.log(`${(100 * gbp).toFixed(2)} USD, ${(100 * eur.rate).toFixed(2)} USD`);\n"
    )
    result = execute(server, code, language="javascript")
    assert result.get("isError") is not True, result
    assert result["content"][0]["text"].strip() == "125.00 USD, 110.00 USD"
    outer = ledger(server, tool="execute")[0]
    children = [e for e in ledger(server, tool="fx_rate") if e.get("parent") == outer["id"]]
    assert len(children) == 2, children
    failing = execute(server, "fx_rate({from: 'XYZ'});\n", language="javascript")
    assert failing["isError"] is True
    assert "ToolCallError: Invalid arguments for tool 'fx_rate'" in failing["content"][0]["text"]
