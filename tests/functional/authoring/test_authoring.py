"""The built-in kiln_* authoring tools on /admin/mcp, through real HTTP with an author key."""

from __future__ import annotations

import json
from typing import Any

import pytest

from support.app import AUTHOR_KEY, RunningKiln

LEGACY = {"mcp-protocol-version": "2025-11-25", "Authorization": f"Bearer {AUTHOR_KEY}"}
GREET = {
    "name": "greet",
    "description": "Say hello.",
    "language": "python",
    "input_schema": {"type": "object", "properties": {"who": {"type": "string"}}},
    "code": "import json, sys\nargs = json.load(sys.stdin)\nprint('hi', args.get('who', 'you'))\n",
}


def call(server: RunningKiln, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments},
    }
    response = server.mcp(body, headers=LEGACY, path="/admin/mcp")
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()["result"]
    return result


def text(result: dict[str, Any]) -> str:
    return str(result["content"][0]["text"])


def test_instructions_describe_the_contract(kiln_server: RunningKiln) -> None:
    result = call(kiln_server, "kiln_instructions", {})
    assert result["isError"] is False
    assert "one JSON object on stdin" in text(result)
    assert "kiln_update_tool" in text(result)


def test_created_tool_is_callable_on_the_public_endpoint(kiln_server: RunningKiln) -> None:
    created = call(kiln_server, "kiln_create_tool", GREET)
    assert created["isError"] is False, created
    assert json.loads(text(created))["revision"] == 1
    body = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "greet", "arguments": {"who": "Ada"}},
    }
    answer = kiln_server.mcp(body, headers={"mcp-protocol-version": "2025-11-25"})
    assert answer.json()["result"]["content"][0]["text"].strip() == "hi Ada"


def test_get_tool_returns_source_and_revision(kiln_server: RunningKiln) -> None:
    call(kiln_server, "kiln_create_tool", GREET)
    got = json.loads(text(call(kiln_server, "kiln_get_tool", {"name": "greet"})))
    assert got["code"] == GREET["code"]
    assert got["revision"] == 1
    assert got["secrets"] == []


def test_update_carries_the_revision_read_and_changes_only_what_is_given(
    kiln_server: RunningKiln,
) -> None:
    call(kiln_server, "kiln_create_tool", GREET)
    updated = call(
        kiln_server,
        "kiln_update_tool",
        {"name": "greet", "revision": 1, "description": "Say hello politely."},
    )
    assert updated["isError"] is False, updated
    got = json.loads(text(call(kiln_server, "kiln_get_tool", {"name": "greet"})))
    assert (got["revision"], got["description"]) == (2, "Say hello politely.")
    assert got["code"] == GREET["code"]


def test_update_from_a_stale_revision_is_refused_and_loses_nothing(
    kiln_server: RunningKiln,
) -> None:
    call(kiln_server, "kiln_create_tool", GREET)
    call(kiln_server, "kiln_update_tool", {"name": "greet", "revision": 1, "description": "A."})
    stale = call(
        kiln_server, "kiln_update_tool", {"name": "greet", "revision": 1, "description": "B."}
    )
    assert stale["isError"] is True
    assert "revision 2 is" in text(stale)
    got = json.loads(text(call(kiln_server, "kiln_get_tool", {"name": "greet"})))
    assert got["description"] == "A."


def test_broken_rules_are_listed_field_by_field(kiln_server: RunningKiln) -> None:
    bad = call(
        kiln_server,
        "kiln_create_tool",
        {**GREET, "name": "kiln_mine", "secrets": ["AWS_SECRET_ACCESS_KEY"], "code": ""},
    )
    assert bad["isError"] is True
    message = text(bad)
    assert message.startswith("The tool was not saved:")
    for field in ("- name:", "- code:", "- secrets[0]:"):
        assert field in message


def test_revisions_say_who_saved_each(kiln_server: RunningKiln) -> None:
    call(kiln_server, "kiln_create_tool", GREET)
    call(kiln_server, "kiln_update_tool", {"name": "greet", "revision": 1, "description": "A."})
    listed = json.loads(text(call(kiln_server, "kiln_list_revisions", {"name": "greet"})))
    assert [(r["revision"], r["created_by"]) for r in listed["revisions"]] == [
        (1, "key:author"),
        (2, "key:author"),
    ]


@pytest.mark.parametrize("name", ["kiln_get_tool", "kiln_list_revisions"])
def test_unknown_tool_is_a_tool_error(kiln_server: RunningKiln, name: str) -> None:
    result = call(kiln_server, name, {"name": "nope"})
    assert result["isError"] is True
    assert "no tool is named 'nope'" in text(result)


def test_authoring_tools_are_not_on_the_public_endpoint(kiln_server: RunningKiln) -> None:
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "kiln_instructions", "arguments": {}},
    }
    response = kiln_server.mcp(body, headers=LEGACY)
    assert "error" in response.json() or response.json()["result"]["isError"] is True
