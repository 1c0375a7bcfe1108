"""A key bound to a view sees over REST exactly what it sees over MCP.

The view `v` shows `seen` (at its head) and `pinned` at revision 1; `hidden` is outside it. A
key bound to `v` — an author key as much as a call key — reads on every REST route only what
`tools/list` shows it: the tools at the revision the view serves, their calls, their bundles,
its own view. Anything else answers as a thing that does not exist. On 4f0be1a an author key
bound to a view listed, read and ran the whole catalog over REST.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from support.app import AUTHOR_KEY, MODERN, RunningKiln, meta, serve, settings_for
from support.aws import fresh_stack

SEEN = {"name": "seen", "description": "seen", "language": "python",
        "code": "print('seen')\n", "requirements": ["six==1.16.0"]}  # fmt: skip
PINNED = {"name": "pinned", "description": "one", "language": "python", "code": "print(1)\n"}
HIDDEN = {"name": "hidden", "description": "hidden", "language": "python",
          "code": "print('hidden')\n", "requirements": ["idna==3.7"]}  # fmt: skip


@pytest.fixture(scope="module")
def kiln(moto_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningKiln]:
    aws = fresh_stack(moto_endpoint)
    yield from serve(settings_for(aws, tmp_path_factory.mktemp("bound-reads")), aws)


@pytest.fixture(scope="module")
def world(kiln: RunningKiln) -> dict[str, Any]:
    """The tools, the view, two keys bound to it, and a call of each tool in the ledger."""
    ids = {}
    for tool in (SEEN, PINNED, HIDDEN):
        made = kiln.api("POST", "/api/tools", json=tool)
        assert made.status_code == 201, made.text
        ids[tool["name"]] = made.json()["id"]
    two = kiln.api("PUT", "/api/tools/pinned", headers={"If-Match": '"1"'},
                   json={**PINNED, "description": "two", "code": "print(2)\n"})  # fmt: skip
    assert two.status_code == 200, two.text
    for view in ({"name": "v", "tools": ["seen", "pinned@1"]}, {"name": "w", "tools": ["hidden"]}):
        assert kiln.api("POST", "/api/views", json=view).status_code == 201
    keys = {}
    for scope in ("author", "call"):
        made = kiln.api("POST", "/api/keys", json={"name": f"v-{scope}", "scope": scope,
                                                   "view": "v"})  # fmt: skip
        assert made.status_code == 201, made.text
        keys[scope] = made.json()["key"]
    for name in ("seen", "pinned", "hidden"):
        called = mcp(kiln, AUTHOR_KEY, "tools/call", {"name": name, "arguments": {}})
        assert "result" in called, called
    bundles = kiln.api("GET", "/api/bundles").json()["bundles"]
    assert len(bundles) == 2, bundles
    return {"ids": ids, "keys": keys}


def mcp(kiln: RunningKiln, key: str, method: str, params: dict[str, Any]) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": {**params, "_meta": meta()}}
    headers = {"Authorization": f"Bearer {key}", "MCP-Protocol-Version": MODERN,
               "Mcp-Method": method}  # fmt: skip
    if "name" in params:
        headers["Mcp-Name"] = params["name"]
    answer = kiln.mcp(body, headers=headers)
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def get(kiln: RunningKiln, key: str, path: str, **params: Any) -> httpx.Response:
    return kiln.api("GET", path, key=key, params=params)


def ok(response: httpx.Response) -> Any:
    assert response.status_code == 200, f"{response.request.url}: {response.text}"
    return response.json()


def unknown(response: httpx.Response) -> str:
    assert response.status_code == 404, f"{response.request.url} showed: {response.text}"
    return str(response.json()["error"]["message"])


@pytest.mark.parametrize("scope", ["author", "call"])
def test_the_tool_list_is_what_tools_list_shows_the_key(
    kiln: RunningKiln, world: dict[str, Any], scope: str
) -> None:
    key = world["keys"][scope]
    listed = ok(get(kiln, key, "/api/tools"))["tools"]
    on_mcp = mcp(kiln, key, "tools/list", {})["result"]["tools"]
    assert sorted(t["name"] for t in listed) == sorted(t["name"] for t in on_mcp)
    assert {t["name"]: t["revision"] for t in listed} == {"seen": 1, "pinned": 1}
    assert {t["name"]: t["description"] for t in listed}["pinned"] == "one"


def test_a_tool_outside_the_view_answers_as_one_that_does_not_exist(
    kiln: RunningKiln, world: dict[str, Any]
) -> None:
    key, hidden = world["keys"]["author"], world["ids"]["hidden"]
    assert unknown(get(kiln, key, "/api/tools/hidden")) == "no tool is named 'hidden'"
    assert unknown(get(kiln, key, "/api/tools/ghost")) == "no tool is named 'ghost'"
    assert unknown(get(kiln, key, f"/api/tools/id:{hidden}")) == f"no tool has the id '{hidden}'"
    for path in ("/api/tools/hidden/revisions", "/api/tools/hidden/revisions/1",
                 "/api/tools/hidden/secrets"):  # fmt: skip
        assert unknown(get(kiln, key, path)) == "no tool is named 'hidden'"
    ran = kiln.api("POST", "/api/tools/hidden/run", key=key, json={"arguments": {}})
    assert unknown(ran) == "no tool is named 'hidden'"
    assert ok(get(kiln, AUTHOR_KEY, "/api/tools/hidden"))["name"] == "hidden"  # unbound: all


def test_a_pinned_tool_is_read_at_its_pinned_revision_only(
    kiln: RunningKiln, world: dict[str, Any]
) -> None:
    key = world["keys"]["author"]
    tool = get(kiln, key, "/api/tools/pinned")
    assert (ok(tool)["revision"], tool.json()["code"]) == (1, "print(1)\n")
    assert tool.headers["etag"] == '"1"'
    revisions = ok(get(kiln, key, "/api/tools/pinned/revisions"))["revisions"]
    assert [r["revision"] for r in revisions] == [1]
    assert ok(get(kiln, key, "/api/tools/pinned/revisions/1"))["code"] == "print(1)\n"
    assert unknown(get(kiln, key, "/api/tools/pinned/revisions/2")) == (
        "tool 'pinned' has no revision 2"
    )
    ran = kiln.api("POST", "/api/tools/pinned/run", key=key, json={"arguments": {}})
    assert ok(ran)["stdout"] == "1\n"
    assert ok(get(kiln, key, "/api/tools/seen/secrets"))["secrets"] == []


def test_the_ledger_and_its_totals_hold_the_views_tools_only(
    kiln: RunningKiln, world: dict[str, Any]
) -> None:
    key = world["keys"]["author"]
    calls = ok(get(kiln, key, "/api/calls"))["calls"]
    assert sorted(c["tool"] for c in calls) == ["pinned", "seen"], calls
    assert ok(get(kiln, key, "/api/calls", tool="hidden"))["calls"] == []
    totals = ok(get(kiln, key, "/api/calls/totals"))
    assert sorted(totals["by_tool"]) == ["pinned", "seen"], totals
    assert totals["by_caller"] == {}
    assert totals["all"]["calls"] == 2
    assert all(set(tools) <= {"pinned", "seen"} for tools in totals["by_hour_tool"].values())
    assert sorted(ok(get(kiln, key, "/api/calls/by-tool"))["tools"]) == ["pinned", "seen"]
    chart = ok(get(kiln, key, "/api/calls/chart", tool="hidden"))
    assert chart["totals"]["calls"] == 0, chart
    assert ok(get(kiln, key, "/api/calls/chart", tool="seen"))["totals"]["calls"] == 1
    everything = ok(get(kiln, AUTHOR_KEY, "/api/calls/totals"))
    assert everything["all"]["calls"] == 3  # unbound: the whole ledger


def test_bundles_and_views_are_those_of_its_view(kiln: RunningKiln, world: dict[str, Any]) -> None:
    key = world["keys"]["author"]
    seen = ok(get(kiln, AUTHOR_KEY, "/api/tools/seen"))["bundle_id"]
    hidden = ok(get(kiln, AUTHOR_KEY, "/api/tools/hidden"))["bundle_id"]
    assert [b["id"] for b in ok(get(kiln, key, "/api/bundles"))["bundles"]] == [seen]
    assert ok(get(kiln, key, f"/api/bundles/{seen}"))["id"] == seen
    assert unknown(get(kiln, key, f"/api/bundles/{hidden}")) == f"bundle {hidden}: no such bundle"
    assert unknown(get(kiln, key, f"/api/bundles/{hidden[:8]}")) == (
        f"bundle {hidden[:8]}: no bundle id starts with it"
    )
    assert [v["name"] for v in ok(get(kiln, key, "/api/views"))["views"]] == ["v"]
    assert ok(get(kiln, key, "/api/views/v"))["name"] == "v"
    assert unknown(get(kiln, key, "/api/views/w")) == "no view is named 'w'"
