"""Digest §7 items 20-29 and the tools/call rules, with real scripts in real child processes."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from support.app import McpServer, start_kiln

NAME_RULE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


@pytest.fixture(scope="module")
def server(moto_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[McpServer]:
    yield from start_kiln(moto_endpoint, tmp_path_factory.mktemp("bundles"))


MISSING = object()


def call(
    server: McpServer, name: str, arguments: object = MISSING, *, modern: bool = True, **kw: Any
) -> dict[str, Any]:
    params: dict[str, object] = {"name": name}
    if arguments is not MISSING:
        params["arguments"] = arguments
    response = (
        server.modern("tools/call", params) if modern else server.legacy("tools/call", params, **kw)
    )
    assert response.status_code == 200
    return response.json()


def test_invalid_cursor_gets_invalid_params(server: McpServer) -> None:
    assert server.legacy("tools/list", {"cursor": "not-ours"}).json()["error"]["code"] == -32602
    assert server.modern("tools/list", {"cursor": "not-ours"}).json()["error"]["code"] == -32602


def test_unknown_tool_gets_invalid_params(server: McpServer) -> None:
    assert call(server, "no_such_tool", {})["error"]["code"] == -32602
    assert call(server, "no_such_tool", {}, modern=False)["error"]["code"] == -32602


def test_null_arguments_are_a_tool_error_and_missing_ones_are_empty(server: McpServer) -> None:
    nulled = call(server, "add_vat", None)["result"]
    assert nulled["isError"] is True
    assert "arguments: must be an object, got null" in nulled["content"][0]["text"]
    assert call(server, "test_simple_text")["result"]["isError"] is False


def test_2025_03_26_gets_only_known_annotation_hints(server: McpServer) -> None:
    tools = server.legacy("tools/list", version="2025-03-26").json()["result"]["tools"]
    allowed = {"title", "readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint"}
    add_vat = next(t for t in tools if t["name"] == "add_vat")
    assert add_vat["annotations"]["readOnlyHint"] is True
    for tool in tools:
        annotations = tool.get("annotations", {})
        assert set(annotations) <= allowed
        assert all(isinstance(v, bool) for k, v in annotations.items() if k != "title")
        assert "title" not in tool
        assert "outputSchema" not in tool


def test_only_tools_whose_manifest_says_task_declare_task_support(server: McpServer) -> None:
    support = {
        tool["name"]: tool.get("execution", {}).get("taskSupport")
        for tool in server.legacy("tools/list").json()["result"]["tools"]
    }
    assert support["slow_compute"] == "optional"
    assert support["failing_job"] == "required"
    assert support["add_vat"] is None
    for tool in server.legacy("tools/list", version="2025-06-18").json()["result"]["tools"]:
        assert "execution" not in tool  # the field exists from 2025-11-25 on


@pytest.mark.parametrize(
    ("name", "types"),
    [
        ("test_simple_text", ["text"]),
        ("test_image_content", ["image"]),
        ("test_audio_content", ["audio"]),
        ("test_embedded_resource", ["resource"]),
        ("test_multiple_content_types", ["text", "image", "resource"]),
    ],
)
def test_fixture_scripts_return_their_content_blocks(
    server: McpServer, name: str, types: list[str]
) -> None:
    result = call(server, name, {})["result"]
    assert result["isError"] is False
    assert [b["type"] for b in result["content"]] == types


def test_error_fixture_returns_is_error_with_its_text(server: McpServer) -> None:
    result = call(server, "test_error_handling", {})["result"]
    assert result["isError"] is True
    assert result["content"][0]["text"] == "This tool intentionally returns an error for testing"


def test_audio_block_is_dropped_with_a_note_for_2024_11_05(server: McpServer) -> None:
    result = call(server, "test_audio_content", {}, modern=False, version="2024-11-05")["result"]
    assert [b["type"] for b in result["content"]] == ["text"]
    assert "audio block left out" in result["content"][0]["text"]


def test_json_schema_2020_12_input_schema_survives_listing(server: McpServer) -> None:
    tools = server.modern("tools/list").json()["result"]["tools"]
    schema = next(t for t in tools if t["name"] == "json_schema_2020_12_tool")["inputSchema"]
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["$defs"]["address"]["$anchor"] == "addressDef"
    assert schema["additionalProperties"] is False
    assert {"allOf", "if", "then", "else"} <= set(schema)
