"""Digest §7 items 20-29 and the tools/list and tools/call rules of issue 3."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from kiln.protocol import CallContext, McpEndpoint, ProtocolSettings, ToolOutcome, ToolView
from support.protocol import Client, FakeBackend, add_vat_tool, body, printing

NAME_RULE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


def many_tools(count: int) -> FakeBackend:
    fake = FakeBackend()
    for i in range(count):
        fake.add(
            ToolView(
                name=f"tool_{i:03d}",
                description=f"Tool {i}",
                input_schema={"type": "object"},
                updated_at=f"2026-10-{1 + i % 28:02d}T00:00:00Z",
            )
        )
    return fake


def list_all(client: Client, *, modern: bool = False) -> list[dict[str, Any]]:
    tools: list[dict[str, Any]] = []
    params: dict[str, Any] = {}
    while True:
        response = (
            client.modern("tools/list", params) if modern else client.legacy("tools/list", params)
        )
        result = body(response)["result"]
        tools += result["tools"]
        if "nextCursor" not in result:
            return tools
        params = {"cursor": result["nextCursor"]}


def test_forged_cursor_with_another_offset_gets_invalid_params() -> None:
    settings = ProtocolSettings(cursor_secret=b"s", page_size=50)
    client = Client(McpEndpoint(many_tools(120), settings))
    cursor = body(client.legacy("tools/list"))["result"]["nextCursor"]
    import base64

    raw = bytearray(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    raw[16:18] = b"99"  # rewrite the offset, keep the signature
    forged = base64.urlsafe_b64encode(bytes(raw)).decode().rstrip("=")
    error = body(client.legacy("tools/list", {"cursor": forged}))["error"]
    assert error["code"] == -32602


def test_cursor_from_another_secret_gets_invalid_params() -> None:
    tools = many_tools(60)
    ours = Client(McpEndpoint(tools, ProtocolSettings(cursor_secret=b"ours", page_size=50)))
    theirs = Client(McpEndpoint(tools, ProtocolSettings(cursor_secret=b"theirs", page_size=50)))
    cursor = body(theirs.legacy("tools/list"))["result"]["nextCursor"]
    assert body(ours.legacy("tools/list", {"cursor": cursor}))["error"]["code"] == -32602


def test_cursor_is_refused_after_the_list_changes() -> None:
    backend = many_tools(60)
    client = Client(McpEndpoint(backend, ProtocolSettings(cursor_secret=b"s", page_size=50)))
    cursor = body(client.legacy("tools/list"))["result"]["nextCursor"]
    backend.add(add_vat_tool())
    error = body(client.legacy("tools/list", {"cursor": cursor}))["error"]
    assert error["code"] == -32602
    assert "changed" in error["message"]


def test_cursors_work_across_endpoints_sharing_a_secret() -> None:
    settings = ProtocolSettings(cursor_secret=b"shared", page_size=50)
    one = Client(McpEndpoint(many_tools(60), settings))
    two = Client(McpEndpoint(many_tools(60), settings))
    cursor = body(one.legacy("tools/list"))["result"]["nextCursor"]
    assert len(body(two.legacy("tools/list", {"cursor": cursor}))["result"]["tools"]) == 10


def test_default_page_holds_a_hundred_tools() -> None:
    client = Client(McpEndpoint(many_tools(120), ProtocolSettings()))
    assert len(body(client.legacy("tools/list"))["result"]["tools"]) == 100


def test_pages_cover_every_tool_once_in_order_newest_first_then_by_name() -> None:
    client = Client(McpEndpoint(many_tools(120), ProtocolSettings(page_size=50)))
    tools = list_all(client, modern=True)
    assert len(tools) == 120
    names = [t["name"] for t in tools]
    assert len(set(names)) == 120
    backend = many_tools(120)
    expected = sorted(backend.tools, key=lambda t: t.name)
    expected.sort(key=lambda t: t.updated_at, reverse=True)
    assert names == [t.name for t in expected]


def test_tool_fields_follow_the_negotiated_version() -> None:
    backend = FakeBackend()
    backend.add(
        add_vat_tool(
            title="Add VAT",
            annotations={"readOnlyHint": True, "title": "VAT"},
            output_schema={"type": "object"},
            meta={"com.example/x": 1},
        )
    )
    client = Client(McpEndpoint(backend, ProtocolSettings()))

    def fields(version: str | None) -> set[str]:
        return set(body(client.legacy("tools/list", version=version))["result"]["tools"][0])

    base = {"name", "description", "inputSchema"}
    assert fields("2024-11-05") == base
    assert fields(None) == base | {"annotations"}  # no header: 2025-03-26
    assert fields("2025-06-18") == base | {"annotations", "title", "outputSchema", "_meta"}
    assert fields("2025-11-25") == base | {"annotations", "title", "outputSchema", "_meta"}
    modern = set(body(client.modern("tools/list"))["result"]["tools"][0])
    assert modern == base | {"annotations", "title", "outputSchema", "_meta"}


def test_non_object_output_schema_is_listed_only_to_the_modern_era() -> None:
    backend = FakeBackend()
    backend.add(add_vat_tool(output_schema={"type": "array"}))
    client = Client(McpEndpoint(backend, ProtocolSettings()))
    legacy = body(client.legacy("tools/list"))["result"]["tools"][0]
    modern = body(client.modern("tools/list"))["result"]["tools"][0]
    assert "outputSchema" not in legacy
    assert modern["outputSchema"] == {"type": "array"}


def test_2025_03_26_annotations_hold_only_the_known_hints() -> None:
    backend = FakeBackend()
    backend.add(add_vat_tool(annotations={"readOnlyHint": True, "title": "VAT", "madeUp": 1}))
    client = Client(McpEndpoint(backend, ProtocolSettings()))
    annotations = body(client.legacy("tools/list", version="2025-03-26"))["result"]["tools"][0][
        "annotations"
    ]
    assert annotations == {"readOnlyHint": True, "title": "VAT"}
    allowed = {"title", "readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint"}
    assert set(annotations) <= allowed


def test_input_schema_survives_listing_unchanged(client: Client) -> None:
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "$defs": {"a": {"$anchor": "x", "type": "string"}},
        "properties": {"a": {"$ref": "#/$defs/a"}},
        "if": {"required": ["a"]},
        "then": {"required": ["a"]},
        "else": {"required": []},
        "additionalProperties": False,
    }
    backend = FakeBackend()
    backend.add(ToolView(name="s", description="d", input_schema=schema))
    c = Client(McpEndpoint(backend, ProtocolSettings()))
    assert body(c.legacy("tools/list"))["result"]["tools"][0]["inputSchema"] == schema
    assert body(c.modern("tools/list"))["result"]["tools"][0]["inputSchema"] == schema


def test_no_tool_declares_task_support_and_no_tasks_capability(client: Client) -> None:
    tool = body(client.legacy("tools/list", version="2025-11-25"))["result"]["tools"][0]
    assert "execution" not in tool


def test_call_without_a_name_gets_invalid_params(client: Client) -> None:
    error = body(client.legacy("tools/call", {"arguments": {}}))["error"]
    assert error["code"] == -32602
    assert "params.name" in error["message"]


def test_arguments_that_fail_the_schema_get_an_is_error_result_naming_each_field(
    client: Client, backend: FakeBackend
) -> None:
    secret = 123456.789
    response = client.modern(
        "tools/call", {"name": "add_vat", "arguments": {"net": -secret, "rate": 900, "x": "hush"}}
    )
    result = body(response)["result"]
    assert result["isError"] is True
    text = result["content"][0]["text"]
    assert result["content"][0]["type"] == "text"
    assert "net: must be ≥ 0" in text
    assert "rate: must be ≤ 100" in text
    assert "x: is not allowed" in text
    assert str(secret) not in text
    assert "hush" not in text
    assert backend.calls == []


def test_missing_arguments_are_treated_as_an_empty_object(backend: FakeBackend) -> None:
    backend.add(ToolView(name="noargs", description="d", input_schema={"type": "object"}))
    client = Client(McpEndpoint(backend, ProtocolSettings()))
    result = body(client.legacy("tools/call", {"name": "noargs"}))["result"]
    assert result["isError"] is False
    assert backend.calls == [("noargs", {})]


@pytest.mark.parametrize(("value", "kind"), [(None, "null"), ([1], "an array"), ("x", "a string")])
def test_null_or_non_object_arguments_get_an_is_error_result(
    client: Client, backend: FakeBackend, value: object, kind: str
) -> None:
    result = body(client.legacy("tools/call", {"name": "add_vat", "arguments": value}))["result"]
    assert result["isError"] is True
    assert f"arguments: must be an object, got {kind}" in result["content"][0]["text"]
    assert backend.calls == []


def test_successful_call_returns_the_contract_text(client: Client) -> None:
    result = body(client.legacy("tools/call", {"name": "add_vat", "arguments": {"net": 100}}))[
        "result"
    ]
    assert result["isError"] is False
    assert json.loads(result["content"][0]["text"])["gross"] == 120.0
    assert "structuredContent" not in result


OUTPUT_SCHEMA = {
    "type": "object",
    "properties": {"gross": {"type": "number", "minimum": 0}},
    "required": ["gross"],
}


def structured_client(stdout: str) -> Client:
    backend = FakeBackend()
    backend.add(add_vat_tool(output_schema=OUTPUT_SCHEMA), printing(stdout))
    return Client(McpEndpoint(backend, ProtocolSettings()))


@pytest.mark.parametrize("version", ["2024-11-05", "2025-03-26"])
def test_older_versions_get_no_structured_content(version: str) -> None:
    client = structured_client('{"gross": 12.5}')
    result = body(
        client.legacy("tools/call", {"name": "add_vat", "arguments": {"net": 1}}, version=version)
    )["result"]
    assert "structuredContent" not in result
    assert result["content"][0]["text"] == '{"gross": 12.5}'


def test_output_that_is_not_json_is_an_error_saying_why() -> None:
    result = body(
        structured_client("gross is 12").modern(
            "tools/call", {"name": "add_vat", "arguments": {"net": 1}}
        )
    )["result"]
    assert result["isError"] is True
    assert "stdout is not a JSON value" in result["content"][0]["text"]
    assert result["content"][1]["text"] == "gross is 12"


def test_legacy_structured_content_must_be_an_object() -> None:
    backend = FakeBackend()
    backend.add(add_vat_tool(output_schema={"type": "object"}), printing("[1, 2]"))
    client = Client(McpEndpoint(backend, ProtocolSettings()))
    result = body(client.legacy("tools/call", {"name": "add_vat", "arguments": {"net": 1}}))[
        "result"
    ]
    assert result["isError"] is True
    assert "must be a JSON object" in result["content"][0]["text"]


def test_unusable_input_schema_is_a_tool_error_not_a_crash(backend: FakeBackend) -> None:
    backend.add(
        ToolView(
            name="badref",
            description="d",
            input_schema={"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}},
        )
    )
    client = Client(McpEndpoint(backend, ProtocolSettings()))
    result = body(client.legacy("tools/call", {"name": "badref", "arguments": {"a": 1}}))["result"]
    assert result["isError"] is True
    assert "$ref" in result["content"][0]["text"]


def test_backend_exception_becomes_internal_error_without_details(backend: FakeBackend) -> None:
    backend.fail_with = RuntimeError("database password is hunter2")
    client = Client(McpEndpoint(backend, ProtocolSettings()))
    for response in (
        client.legacy("tools/call", {"name": "add_vat", "arguments": {"net": 1}}),
        client.modern("tools/list"),
    ):
        assert response.status == 200
        error = body(response)["error"]
        assert error == {"code": -32603, "message": "Internal error"}
        assert b"hunter2" not in response.body


def test_list_is_private_when_it_depends_on_the_caller(backend: FakeBackend) -> None:
    endpoint = McpEndpoint(backend, ProtocolSettings())
    anonymous = body(Client(endpoint).modern("tools/list"))["result"]
    keyed = body(Client(endpoint, principal="key-1").modern("tools/list"))["result"]
    assert anonymous["cacheScope"] == "public"
    assert keyed["cacheScope"] == "private"


def test_list_ttl_comes_from_settings(backend: FakeBackend) -> None:
    client = Client(McpEndpoint(backend, ProtocolSettings(list_ttl_ms=1234)))
    assert body(client.modern("tools/list"))["result"]["ttlMs"] == 1234


def test_repeated_lists_are_served_from_one_rendering(backend: FakeBackend) -> None:
    endpoint = McpEndpoint(backend, ProtocolSettings())
    first = Client(endpoint).modern("tools/list").body
    second = Client(endpoint).modern("tools/list", rid=2).body
    assert first.replace(b'"id":1', b'"id":2') == second


def test_a_changed_tool_shows_on_the_next_list(backend: FakeBackend) -> None:
    client = Client(McpEndpoint(backend, ProtocolSettings()))
    client.legacy("tools/list")
    backend.tools[0] = add_vat_tool(description="Changed.")
    assert body(client.legacy("tools/list"))["result"]["tools"][0]["description"] == "Changed."


def test_call_context_reaches_the_backend() -> None:
    seen: list[CallContext] = []

    class Recording(FakeBackend):
        async def call_tool(self, tool: ToolView, arguments: Any, ctx: CallContext) -> ToolOutcome:
            seen.append(ctx)
            return ToolOutcome(text="ok", is_error=False, stdout="ok")

    backend = Recording()
    backend.add(add_vat_tool())
    Client(McpEndpoint(backend, ProtocolSettings()), principal="p").legacy(
        "tools/call", {"name": "add_vat", "arguments": {"net": 1}}
    )
    assert seen[0].principal == "p"
