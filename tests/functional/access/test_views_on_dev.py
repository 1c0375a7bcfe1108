"""Views, key bindings, pins and tags on `kiln dev`, on both wires (2025-11-25 and 2026-07-28)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from support.devserver import DevServer, kiln_dev

WIRES = ["legacy", "modern"]


def tool(root: Path, name: str, text: str, **manifest: Any) -> None:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "tool.json").write_text(json.dumps({"description": f"Prints {text}.", **manifest}))
    (folder / "main.py").write_text(f"print({text!r})\n")


def view(root: Path, name: str, **body: Any) -> None:
    (root / f"{name}.view.json").write_text(json.dumps(body))


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    root = tmp_path_factory.mktemp("views")
    tools = root / "tools"
    tool(tools, "revised", "revision 1")
    tool(tools, "taxed", "taxed", tags=["finance"])
    tool(tools, "outside", "outside")
    tool(tools, "later", "later")
    view(tools, "finance", tools=["revised@1", "tag:finance"], published=True)
    view(tools, "newcomers", tools=["tag:newcomer"])
    view(tools, "open", tools=["outside"], published=True, anonymous=True)
    view(tools, "hidden", tools=["outside"])
    with kiln_dev(root / "state", "--no-examples", "--tools", str(tools)) as server:
        yield server


@pytest.fixture(scope="module")
def finance_key(dev: DevServer) -> str:
    return dev.create_key("finance-client", "--view", "finance")


def listed(response: httpx.Response) -> set[str]:
    assert response.status_code == 200, response.text
    return {t["name"] for t in response.json()["result"]["tools"]}


def output(response: httpx.Response) -> str:
    assert response.status_code == 200, response.text
    result = response.json()["result"]
    assert result["isError"] is False, result
    return str(result["content"][0]["text"]).strip()


def call(name: str) -> dict[str, Any]:
    return {"name": name, "arguments": {}}


@pytest.mark.parametrize("wire", WIRES)
def test_a_key_bound_to_a_view_lists_exactly_the_views_tools(
    dev: DevServer, finance_key: str, wire: str
) -> None:
    assert listed(dev.mcp("tools/list", wire=wire, key=finance_key)) == {"revised", "taxed"}
    everything = listed(dev.mcp("tools/list", wire=wire))
    assert {"revised", "taxed", "outside", "later"} <= everything


@pytest.mark.parametrize("wire", WIRES)
def test_calling_a_tool_outside_the_view_answers_exactly_like_an_unknown_tool(
    dev: DevServer, finance_key: str, wire: str
) -> None:
    assert output(dev.mcp("tools/call", call("outside"), wire=wire)) == "outside"
    hidden = dev.mcp("tools/call", call("outside"), wire=wire, key=finance_key)
    unknown = dev.mcp("tools/call", call("nosuchtl"), wire=wire, key=finance_key)
    assert hidden.status_code == unknown.status_code
    assert hidden.json() == json.loads(unknown.text.replace("nosuchtl", "outside"))
    assert "error" in hidden.json()
    assert hidden.headers.get("retry-after") is None


def test_a_pinned_tool_keeps_its_old_revisions_output_after_two_updates(
    dev: DevServer, finance_key: str
) -> None:
    for number in (2, 3):
        current = dev.api("GET", "/api/tools/revised").json()
        current["code"] = f"print('revision {number}')\n"
        saved = dev.api("PUT", "/api/tools/revised", json=current,
                        headers={"If-Match": f'"{number - 1}"'})  # fmt: skip
        assert saved.status_code == 200, saved.text
    for wire in WIRES:
        assert output(dev.mcp("tools/call", call("revised"), wire=wire)) == "revision 3"
        pinned = dev.mcp("tools/call", call("revised"), wire=wire, key=finance_key)
        assert output(pinned) == "revision 1"


def test_a_tag_added_to_a_tool_brings_it_into_a_tag_selected_view_on_the_next_request(
    dev: DevServer,
) -> None:
    key = dev.create_key("newcomer-client", "--view", "newcomers")
    for wire in WIRES:
        assert listed(dev.mcp("tools/list", wire=wire, key=key)) == set()
    current = dev.api("GET", "/api/tools/later").json()
    current["tags"] = ["newcomer"]
    saved = dev.api("PUT", "/api/tools/later", json=current, headers={"If-Match": '"1"'})
    assert saved.status_code == 200, saved.text
    for wire in WIRES:
        assert listed(dev.mcp("tools/list", wire=wire, key=key)) == {"later"}
        assert output(dev.mcp("tools/call", call("later"), wire=wire, key=key)) == "later"


@pytest.mark.parametrize("wire", WIRES)
def test_a_published_view_is_served_on_its_own_path(
    dev: DevServer, finance_key: str, wire: str
) -> None:
    assert listed(dev.mcp("tools/list", wire=wire, path="/mcp/v/open")) == {"outside"}
    assert dev.mcp("tools/list", wire=wire, path="/mcp/v/finance").status_code == 401
    keyed = dev.mcp("tools/list", wire=wire, path="/mcp/v/finance", key=finance_key)
    assert listed(keyed) == {"revised", "taxed"}
    other = dev.mcp("tools/list", wire=wire, path="/mcp/v/open", key=finance_key)
    assert other.status_code == 403
    assert "bound to view 'finance'" in other.text
    for missing in ("/mcp/v/hidden", "/mcp/v/nope"):
        assert dev.mcp("tools/list", wire=wire, path=missing).status_code == 404


def test_a_key_bound_to_a_view_lists_only_the_views_tools_over_rest_too(
    dev: DevServer, finance_key: str
) -> None:
    headers = {"Authorization": f"Bearer {finance_key}"}
    listed_ = dev.http.get(dev.url + "/api/tools", headers=headers)
    assert listed_.status_code == 200, listed_.text
    assert {t["name"] for t in listed_.json()["tools"]} == {"revised", "taxed"}
    everything = {t["name"] for t in dev.api("GET", "/api/tools").json()["tools"]}
    assert {"revised", "taxed", "outside", "later"} <= everything  # the author sees all
