"""Digest §7 items 1-11: the Streamable HTTP rules shared by both eras."""

from __future__ import annotations

import json

import pytest

from kiln.protocol import McpEndpoint, ProtocolSettings
from support.protocol import Client, FakeBackend, body


def test_posted_client_response_gets_202_in_the_legacy_era(client: Client) -> None:
    response = client.post({"jsonrpc": "2.0", "id": 9, "result": {}})
    assert (response.status, response.body) == (202, b"")


def test_configured_origin_is_allowed_and_others_are_not(backend: FakeBackend) -> None:
    settings = ProtocolSettings(allowed_origins=("https://app.example.com",))
    client = Client(McpEndpoint(backend, settings))
    message = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    assert client.post(message, {"origin": "https://app.example.com"}).status == 200
    assert client.post(message, {"origin": "http://localhost:3000"}).status == 403


def test_any_host_is_served_when_not_bound_to_loopback(backend: FakeBackend) -> None:
    client = Client(McpEndpoint(backend, ProtocolSettings()))
    response = client.post({"jsonrpc": "2.0", "id": 1, "method": "ping"}, {"host": "mcp.example"})
    assert response.status == 200


@pytest.mark.parametrize("raw", [b"\xff\xfe", b"NaN", b'{"a": Infinity}'])
def test_invalid_utf8_and_non_finite_numbers_are_parse_errors(client: Client, raw: bytes) -> None:
    response = client.raw(raw)
    assert (response.status, body(response)["error"]["code"]) == (400, -32700)


def test_content_type_with_charset_is_accepted(client: Client) -> None:
    response = client.raw(
        b'{"jsonrpc":"2.0","id":1,"method":"ping"}',
        {"content-type": "application/json; charset=utf-8"},
    )
    assert response.status == 200


def test_body_over_the_cap_gets_413(backend: FakeBackend) -> None:
    client = Client(McpEndpoint(backend, ProtocolSettings(max_body_bytes=100)))
    padded = {"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"pad": "x" * 200}}
    response = client.post(padded)
    assert response.status == 413
    assert "limit is 100" in body(response)["error"]["message"]


def test_batch_mixing_a_request_and_a_notification_answers_only_the_request(
    client: Client,
) -> None:
    batch = [
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": "p", "method": "ping"},
    ]
    assert body(client.post(batch)) == [{"jsonrpc": "2.0", "id": "p", "result": {}}]


def test_batch_of_twenty_is_served(client: Client) -> None:
    batch = [{"jsonrpc": "2.0", "id": i, "method": "ping"} for i in range(20)]
    assert len(body(client.post(batch))) == 20


def test_invalid_element_inside_a_batch_gets_its_own_error(client: Client) -> None:
    batch = [{"jsonrpc": "2.0", "id": 1, "method": "ping"}, 42]
    replies = body(client.post(batch))
    assert replies[0]["result"] == {}
    assert replies[1]["error"]["code"] == -32600


def test_every_error_body_is_a_json_rpc_error(client: Client) -> None:
    responses = [
        client.raw(b"", method="GET"),
        client.raw(b"{", {}),
        client.raw(b"{}", {"content-type": "text/plain"}),
        client.post({"jsonrpc": "2.0", "id": 1, "method": "ping"}, {"origin": "https://x.y"}),
        client.post([]),
        client.post({"id": 1}),
        client.modern("nope/nothing"),
    ]
    for response in responses:
        assert response.status >= 400
        payload = json.loads(response.body)
        assert payload["jsonrpc"] == "2.0"
        assert isinstance(payload["error"]["code"], int)
        assert payload["error"]["message"]
