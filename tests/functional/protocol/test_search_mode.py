"""Search mode (protocol/discovery.py): a view, or the root catalog, served as three meta-tools.

On a real `kiln dev` over HTTP, both wires: a view in `search` mode, reached by a key bound to
it, lists `search_tools`, `describe_tools` and `call_tool` only; each sees exactly the view's
tools (outside it: the error a direct call gets); `call_tool` is a direct call in every way
that shows (its result, argument checks, quotas, the ledger). The root catalog in search mode
(KILN_CATALOG_MODE) through a real `kiln stdio` and the in-process endpoint.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from conftest import AwsStack
from kiln.protocol import HttpRequest
from kiln.protocol.backend import CallContext
from kiln.settings import Settings
from kiln.stack import build_kiln
from support.app import META_CAPS, MODERN
from support.app import meta as app_meta
from support.devserver import DevServer, clean_env, kiln_dev

WIRES = ["legacy", "modern"]
META = {"search_tools", "describe_tools", "call_tool"}
FX = """import json, sys
a = json.load(sys.stdin)
print(f"1 {a['source']} = 187.5 {a['target']}")
"""


def tool(root: Path, name: str, description: str, code: str, **manifest: Any) -> None:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "tool.json").write_text(json.dumps({"description": description, **manifest}))
    (folder / "main.py").write_text(code)


def currency_args() -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "source": {"type": "string", "description": "ISO 4217 code to convert from"},
            "target": {"type": "string", "description": "ISO 4217 code to convert to"},
        },
        "required": ["source", "target"],
        "additionalProperties": False,
    }


def write_tools(root: Path) -> None:
    tool(root, "fx_rate", "Exchange rate between two currencies, from the central bank.", FX,
         tags=["finance"], input_schema=currency_args(),
         annotations={"readOnlyHint": True})  # fmt: skip
    tool(root, "weather_forecast", "Seven-day outlook: highs, lows and precipitation.",
         "print('sunny')\n", tags=["finance"])  # fmt: skip
    tool(root, "ledgered_rate", "Currency rate, as fx_rate, for the ledger test.", FX,
         tags=["finance"], input_schema=currency_args())  # fmt: skip
    tool(root, "payroll_secret", "Salary of every employee in the company.", "print('$$$')\n")
    tool(root, "wipe", "Deletes the cache.", "print('wiped')\n",
         annotations={"destructiveHint": True})  # fmt: skip
    (root / "finance.view.json").write_text(
        json.dumps({"tools": ["tag:finance"], "published": True, "mode": "search"})
    )
    (root / "careful.view.json").write_text(json.dumps(
        {"tools": ["wipe"], "published": True, "anonymous": True, "mode": "search",
         "confirm": "destructive"}))  # fmt: skip


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    root = tmp_path_factory.mktemp("search-mode")
    write_tools(root / "tools")
    with kiln_dev(root / "state", "--no-examples", "--tools", str(root / "tools")) as server:
        yield server


@pytest.fixture(scope="module")
def key(dev: DevServer) -> str:
    return dev.create_key("searcher", "--view", "finance")


def result(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 200, response.text
    body = response.json()
    assert "result" in body, body
    return dict(body["result"])


def listed(response: httpx.Response) -> dict[str, dict[str, Any]]:
    return {t["name"]: t for t in result(response)["tools"]}


def found(response: httpx.Response) -> list[dict[str, Any]]:
    answer = result(response)
    assert answer["isError"] is False, answer
    return list(json.loads(answer["content"][0]["text"])["tools"])


def meta_call(meta: str, **arguments: Any) -> dict[str, Any]:
    return {"name": meta, "arguments": arguments}


@pytest.mark.parametrize("wire", WIRES)
def test_a_search_mode_view_lists_only_the_meta_tools_with_schemas_and_hints(
    dev: DevServer, key: str, wire: str
) -> None:
    tools = listed(dev.mcp("tools/list", wire=wire, key=key))
    assert set(tools) == META
    assert tools["search_tools"]["inputSchema"]["required"] == ["query"]
    assert tools["describe_tools"]["inputSchema"]["properties"]["names"]["type"] == "array"
    assert tools["call_tool"]["inputSchema"]["required"] == ["name"]
    for name in ("search_tools", "describe_tools"):
        assert tools[name]["annotations"]["readOnlyHint"] is True
    assert "readOnlyHint" not in tools["call_tool"].get("annotations", {})
    # The same view on its own path, and the root catalog (list mode) beside it.
    assert set(listed(dev.mcp("tools/list", wire=wire, key=key, path="/mcp/v/finance"))) == META
    everything = listed(dev.mcp("tools/list", wire=wire))
    assert {"fx_rate", "payroll_secret"} <= set(everything)
    assert not META & set(everything)


@pytest.mark.parametrize("wire", WIRES)
def test_list_mode_has_no_meta_tools_to_call(dev: DevServer, wire: str) -> None:
    meta = dev.mcp("tools/call", meta_call("search_tools", query="rate"), wire=wire)
    unknown = dev.mcp("tools/call", meta_call("nosuchthing", query="rate"), wire=wire)
    assert meta.json() == json.loads(unknown.text.replace("nosuchthing", "search_tools"))


@pytest.mark.parametrize("wire", WIRES)
def test_search_tools_ranks_the_views_tools_and_never_shows_one_outside_it(
    dev: DevServer, key: str, wire: str
) -> None:
    hits = found(dev.mcp("tools/call", meta_call("search_tools", query="currencies exchange"),
                         wire=wire, key=key))  # fmt: skip
    assert hits[0]["name"] in ("fx_rate", "ledgered_rate"), hits
    assert hits[0]["arguments"] == ["source", "target"]
    outside = meta_call("search_tools", query="salary of every employee", limit=10)
    names = {h["name"] for h in found(dev.mcp("tools/call", outside, wire=wire, key=key))}
    assert "payroll_secret" not in names
    # Without the key the root catalog is in list mode: there is no search to make.
    assert "error" in dev.mcp("tools/call", outside, wire=wire).json()


@pytest.mark.parametrize("wire", WIRES)
def test_describe_tools_gives_exactly_the_tools_list_entry(
    dev: DevServer, key: str, wire: str
) -> None:
    described = found(dev.mcp("tools/call", meta_call("describe_tools", names=["fx_rate"]),
                              wire=wire, key=key))  # fmt: skip
    as_listed = listed(dev.mcp("tools/list", wire=wire))["fx_rate"]
    assert described == [as_listed]


@pytest.mark.parametrize("wire", WIRES)
@pytest.mark.parametrize("meta", ["describe_tools", "call_tool"])
def test_a_tool_outside_the_view_gets_the_error_of_a_direct_call(
    dev: DevServer, key: str, wire: str, meta: str
) -> None:
    direct = dev.mcp("tools/call", meta_call("payroll_secret"), wire=wire, key=key)
    if meta == "describe_tools":
        through = meta_call(meta, names=["payroll_secret"])
    else:
        through = meta_call(meta, name="payroll_secret", arguments={})
    answer = dev.mcp("tools/call", through, wire=wire, key=key)
    assert (answer.status_code, answer.json()) == (direct.status_code, direct.json())
    assert "Unknown tool: payroll_secret" in answer.text


@pytest.mark.parametrize("wire", WIRES)
def test_call_tool_answers_as_a_direct_call_and_checks_arguments_as_one(
    dev: DevServer, key: str, wire: str
) -> None:
    for arguments in ({"source": "GBP", "target": "JPY"}, {"source": "GBP", "currency": 3}):
        direct = result(dev.mcp("tools/call", {"name": "fx_rate", "arguments": arguments},
                                wire=wire, key=key))  # fmt: skip
        through = result(dev.mcp("tools/call", meta_call("call_tool", name="fx_rate",
                                 arguments=arguments), wire=wire, key=key))  # fmt: skip
        assert through == direct
    assert through["isError"] is True
    assert "currency" in through["content"][0]["text"], through
    bad = result(dev.mcp("tools/call", meta_call("call_tool", arguments={}), wire=wire, key=key))
    assert bad["isError"] is True
    assert "name" in bad["content"][0]["text"], bad


def test_call_tool_is_ledgered_and_counted_like_a_direct_call(dev: DevServer) -> None:
    quota_key = dev.create_key("searcher-quota", "--view", "finance", "--calls-per-minute", "2")
    currencies = {"source": "GBP", "target": "EUR"}
    good = meta_call("call_tool", name="ledgered_rate", arguments=currencies)
    assert result(dev.mcp("tools/call", good, key=quota_key))["isError"] is False
    bad = meta_call("call_tool", name="ledgered_rate", arguments={"source": "GBP"})
    assert result(dev.mcp("tools/call", bad, key=quota_key))["isError"] is True
    # Two calls were counted against the key's 2 a minute; a third, direct or not, is refused.
    refused = dev.mcp("tools/call", good, key=quota_key)
    assert refused.status_code == 429, refused.text
    assert refused.json()["error"]["code"] == -32029
    entries = dev.api("GET", "/api/calls", params={"tool": "ledgered_rate", "limit": 10})
    assert entries.status_code == 200, entries.text
    seen = sorted((e["caller"], e["view"], e["outcome"]) for e in entries.json()["calls"])
    caller = "key:searcher-quota"
    assert seen == [(caller, "finance", "ok"), (caller, "finance", "refused"),
                    (caller, "finance", "tool_error")]  # fmt: skip
    # Searching and describing run nothing: no ledger entry, no quota.
    assert not dev.api("GET", "/api/calls", params={"tool": "search_tools"}).json()["calls"]


def test_call_tool_asks_for_approval_as_a_direct_call_and_runs_on_accept(dev: DevServer) -> None:
    def call(**params: Any) -> dict[str, Any]:
        body = {**meta_call("call_tool", name="wipe", arguments={}), **params,
                "_meta": {**app_meta(), META_CAPS: {"elicitation": {}}}}  # fmt: skip
        headers = {"Accept": "application/json", "MCP-Protocol-Version": MODERN,
                   "Mcp-Method": "tools/call", "Mcp-Name": "call_tool"}  # fmt: skip
        message = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": body}
        return result(dev.http.post(dev.url + "/mcp/v/careful", json=message, headers=headers))

    first = call()
    assert first["resultType"] == "input_required", first
    assert "'wipe'" in first["inputRequests"]["kiln/approval"]["params"]["message"]
    answer = {"kiln/approval": {"action": "accept", "content": {"approve": True}}}
    done = call(inputResponses=answer, requestState=first["requestState"])
    assert done["content"][0]["text"].strip() == "wiped", done
    entries = dev.api("GET", "/api/calls", params={"tool": "wipe"}).json()["calls"]
    assert [e["detail"][:24] for e in entries] == ["approved by anonymous at"], entries


def test_a_views_mode_is_set_over_rest_and_the_cli(dev: DevServer, key: str) -> None:
    path = "/api/views/finance"
    current = dev.api("GET", path).json()
    assert current["mode"] == "search"
    body = {k: current[k] for k in ("tools", "published", "anonymous")}
    wrong = dev.api("PUT", path, json={**body, "mode": "browse"},
                    headers={"If-Match": f'"{current["revision"]}"'})  # fmt: skip
    assert wrong.status_code == 422, wrong.text
    assert "mode" in wrong.text
    assert "search" in wrong.text
    switched = dev.kiln("views", "mode", "finance", "list")
    assert switched.returncode == 0, switched.stderr
    try:
        assert "fx_rate" in listed(dev.mcp("tools/list", key=key))
        shown = dev.kiln("views", "ls")
        row = next(line for line in shown.stdout.splitlines() if line.startswith("finance"))
        assert " list " in row, shown.stdout
    finally:
        back = dev.kiln("views", "mode", "finance", "search")
        assert back.returncode == 0, back.stderr
    assert set(listed(dev.mcp("tools/list", key=key))) == META


# -- the root catalog in search mode: kiln stdio and the in-process endpoint ------------------

INITIALIZE = {"jsonrpc": "2.0", "id": "init", "method": "initialize",
              "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                         "clientInfo": {"name": "search-suite"}}}  # fmt: skip
ROOT_EXCHANGE = [
    {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}},
    {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
     "params": meta_call("search_tools", query="exchange rates of currencies", limit=2)},
    {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
     "params": meta_call("call_tool", name="fx_rate",
                         arguments={"source": "GBP", "target": "JPY"})},
    {"jsonrpc": "2.0", "id": 4, "method": "tools/call",
     "params": meta_call("describe_tools", names=["payroll_secret", "weather_forecast"])},
]  # fmt: skip


def check_root_answers(answers: dict[Any, dict[str, Any]]) -> None:
    assert {t["name"] for t in answers[1]["result"]["tools"]} == META, answers[1]
    hits = json.loads(answers[2]["result"]["content"][0]["text"])["tools"]
    assert hits[0]["name"] in ("fx_rate", "ledgered_rate"), hits
    assert answers[3]["result"]["content"][0]["text"].strip() == "1 GBP = 187.5 JPY", answers[3]
    described = json.loads(answers[4]["result"]["content"][0]["text"])["tools"]
    assert [d["name"] for d in described] == ["payroll_secret", "weather_forecast"]


def test_the_root_catalog_in_search_mode_over_kiln_stdio(tmp_path: Path) -> None:
    write_tools(tmp_path / "tools")
    lines = [INITIALIZE, {"jsonrpc": "2.0", "method": "notifications/initialized"}, *ROOT_EXCHANGE]
    done = subprocess.run(
        [sys.executable, "-m", "kiln.cli", "stdio", "--no-examples", "--tools",
         str(tmp_path / "tools"), "--state-dir", str(tmp_path / "state")],
        input="".join(json.dumps(line) + "\n" for line in lines).encode(),
        capture_output=True, env=clean_env(KILN_CATALOG_MODE="search"), timeout=180, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    answers = [json.loads(line) for line in done.stdout.splitlines()]
    check_root_answers({a["id"]: a for a in answers if "id" in a})


def pushed(aws: AwsStack, tmp_path: Path) -> None:
    from kiln.authoring import AuthoringService, FolderTarget
    from kiln.catalog.files import push, tool_folders
    from kiln.catalog.store import CatalogStore

    write_tools(tmp_path / "tools")
    store = CatalogStore(aws.clients.dynamodb, aws.clients.s3, table=aws.table, bucket=aws.bucket)
    push(FolderTarget(AuthoringService(store)), tool_folders(tmp_path / "tools"))


def test_the_root_catalog_in_search_mode_in_process(aws: AwsStack, tmp_path: Path) -> None:
    pushed(aws, tmp_path)
    settings = Settings(
        table=aws.table, bucket=aws.bucket, endpoint_url=aws.endpoint_url, region="us-east-1",
        bundle_cache_dir=tmp_path / "bundles", local_time_budget_s=30.0, catalog_mode="search",
    )  # fmt: skip
    endpoint = build_kiln(settings, clients=aws.clients).endpoint
    headers = {"content-type": "application/json", "mcp-protocol-version": "2025-11-25",
               "accept": "application/json, text/event-stream"}  # fmt: skip

    async def exchange() -> dict[Any, dict[str, Any]]:
        answers = {}
        for message in ROOT_EXCHANGE:
            request = HttpRequest("POST", headers, json.dumps(message).encode())
            reply = await endpoint.handle(request, CallContext(time_left_s=30.0))
            assert reply.body is not None, reply
            answers[message["id"]] = json.loads(reply.body)
        return answers

    check_root_answers(asyncio.run(exchange()))


def test_the_root_catalog_in_search_mode_through_the_lambda_handler(
    aws: AwsStack, tmp_path: Path
) -> None:
    from functional.protocol.test_mcp_behaviour import lambda_transport

    pushed(aws, tmp_path)
    exchange = next(lambda_transport(aws, tmp_path, KILN_CATALOG_MODE="search"))
    check_root_answers(exchange(ROOT_EXCHANGE))
