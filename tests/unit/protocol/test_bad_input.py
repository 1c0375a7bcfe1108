"""Bad input the fuzz runs found: each gets a specific JSON-RPC answer, never an internal error."""

from __future__ import annotations

import asyncio
import json

import pytest

from kiln.local.linewise import read_lines
from kiln.protocol import McpEndpoint, ProtocolSettings
from kiln.protocol.jsontext import dumps, lone_surrogate_path
from support.protocol import Client, FakeBackend, add_vat_tool, body, printing

LONE = "\\udfff"  # a JSON escape for a lone low surrogate, as a fuzzer sends it
HEADERS = {"mcp-protocol-version": "2025-11-25"}


def _raw(template: str) -> bytes:
    return template.replace("LONE", LONE).encode()


@pytest.mark.parametrize(
    ("raw", "where"),
    [
        pytest.param(
            '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"aLONE"}}',
            "params.name",
            id="tool name",
        ),
        pytest.param('{"jsonrpc":"2.0","id":"LONE","method":"ping"}', "id", id="request id"),
        pytest.param('{"jsonrpc":"2.0","id":1,"method":"pingLONE"}', "method", id="method"),
        pytest.param(
            '{"jsonrpc":"2.0","id":1,"method":"tools/call",'
            '"params":{"name":"add_vat","arguments":{"LONE":1}}}',
            "params.arguments (a key)",
            id="argument key",
        ),
    ],
)
def test_a_lone_surrogate_gets_invalid_request_naming_where_it_is(
    client: Client, raw: str, where: str
) -> None:
    response = client.raw(_raw(raw), HEADERS)
    reply = body(response)
    assert response.status == 400
    assert reply["error"]["code"] == -32600
    assert reply["error"]["message"].startswith(f"Invalid Request: {where} holds a \\u escape")


def test_the_id_is_echoed_when_only_another_field_holds_the_surrogate(client: Client) -> None:
    raw = _raw('{"jsonrpc":"2.0","id":7,"method":"pingLONE"}')
    assert body(client.raw(raw, HEADERS))["id"] == 7


def test_a_surrogate_id_is_answered_with_a_null_id(client: Client) -> None:
    raw = _raw('{"jsonrpc":"2.0","id":"LONE","method":"ping"}')
    assert body(client.raw(raw, HEADERS))["id"] is None


def test_a_valid_surrogate_pair_is_an_ordinary_character(client: Client) -> None:
    raw = b'{"jsonrpc":"2.0","id":"\\ud83d\\ude00","method":"ping"}'
    response = client.raw(raw, HEADERS)
    assert (response.status, body(response)) == (
        200,
        {"jsonrpc": "2.0", "id": "\U0001f600", "result": {}},
    )


def test_one_bad_message_in_a_batch_leaves_the_others_answered(client: Client) -> None:
    raw = _raw(
        '[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"pingLONE"}]'
    )
    replies = body(client.raw(raw, {"mcp-protocol-version": "2025-03-26"}))
    assert replies[0] == {"jsonrpc": "2.0", "id": 1, "result": {}}
    assert replies[1]["error"]["code"] == -32600


def test_a_tool_printing_a_lone_surrogate_in_kiln_content_gets_a_tool_error() -> None:
    backend = FakeBackend()
    stdout = '{"kiln/content": [{"type": "text", "text": "x' + LONE + '"}]}'
    backend.add(add_vat_tool(name="bad_text"), printing(stdout))
    client = Client(McpEndpoint(backend, ProtocolSettings(loopback_bind=True)))
    response = client.legacy("tools/call", {"name": "bad_text", "arguments": {"net": 1}})
    result = body(response)["result"]
    assert response.status == 200
    assert result["isError"] is True
    assert "kiln/content[0].text holds a \\u escape" in result["content"][0]["text"]


def test_invalid_utf8_gets_a_parse_error_naming_the_byte(client: Client) -> None:
    reply = body(client.raw(b'{"jsonrpc":"2.0","id":1,"method":"\xff"}', HEADERS))
    assert reply["error"]["code"] == -32700
    assert reply["error"]["message"] == "Parse error: the body is not valid UTF-8 (byte 34)"


@pytest.mark.parametrize("method", ["TRACE", "PUT", "PATCH", "OPTIONS", "X-ODD"])
def test_any_other_http_method_gets_405_as_a_json_rpc_error(client: Client, method: str) -> None:
    response = client.raw(b"", method=method)
    assert response.status == 405
    assert response.headers["allow"] == "POST"
    assert body(response)["error"]["code"] == -32600


def test_a_long_unsupported_version_header_is_not_echoed_whole(client: Client) -> None:
    long_value = "v" * 5000
    reply = body(client.legacy("ping", version=long_value))
    assert long_value not in json.dumps(reply)
    assert reply["error"]["code"] == -32022


def test_a_long_method_name_is_not_echoed_whole(client: Client) -> None:
    reply = body(client.legacy("m" * 5000))
    assert reply["error"]["code"] == -32601
    assert len(reply["error"]["message"]) < 200


def test_dumps_writes_a_stray_surrogate_as_an_escape_instead_of_raising() -> None:
    assert dumps({"a": "\udfff"}) == b'{"a":"\\udfff"}'


def test_lone_surrogate_path_finds_nested_values_and_keys() -> None:
    assert lone_surrogate_path({"a": [1, {"b": "\ud800"}]}) == "a[1].b"
    assert lone_surrogate_path({"a": {"\ud800": 1}}) == "a (a key)"
    assert lone_surrogate_path({"a": "\U0001f600"}) is None


def _lines(data: bytes, limit: int) -> list[object]:
    async def collect() -> list[object]:
        reader = asyncio.StreamReader()
        reader.feed_data(data)
        reader.feed_eof()
        return [
            line if isinstance(line, bytes) else ("too long", line.size)
            async for line in read_lines(reader, limit)
        ]

    return asyncio.run(collect())


def test_read_lines_drops_an_over_long_line_and_reads_the_next_whole() -> None:
    data = b"a\n" + b"x" * 200_000 + b"\nb\n" + b"y" * 50 + b"\nlast"
    assert _lines(data, 100) == [b"a", ("too long", 200_000), b"b", b"y" * 50, b"last"]


def test_read_lines_reports_an_over_long_last_line_without_a_newline() -> None:
    assert _lines(b"ok\n" + b"z" * 300, 100) == [b"ok", ("too long", 300)]
