"""Digest §7 items 1-11: the Streamable HTTP rules shared by both eras."""

from __future__ import annotations

import json

import pytest

from kiln.protocol import McpEndpoint, ProtocolSettings
from support.protocol import MODERN, Client, FakeBackend, body, meta


def test_notification_gets_202_and_no_body(client: Client) -> None:
    response = client.post({"jsonrpc": "2.0", "method": "notifications/initialized"})
    assert response.status == 202
    assert response.body == b""
    assert "content-type" not in response.headers


def test_modern_notification_gets_202_and_no_body(client: Client) -> None:
    message = {
        "jsonrpc": "2.0",
        "method": "notifications/cancelled",
        "params": {"requestId": 3, "_meta": meta()},
    }
    response = client.post(message, {"mcp-protocol-version": MODERN})
    assert (response.status, response.body) == (202, b"")


def test_posted_client_response_gets_202_in_the_legacy_era(client: Client) -> None:
    response = client.post({"jsonrpc": "2.0", "id": 9, "result": {}})
    assert (response.status, response.body) == (202, b"")


@pytest.mark.parametrize("rid", [7, "req-7"])
def test_request_gets_200_json_with_its_own_id(client: Client, rid: object) -> None:
    response = client.legacy("ping", rid=rid)
    assert response.status == 200
    assert response.headers["content-type"] == "application/json"
    assert body(response) == {"jsonrpc": "2.0", "id": rid, "result": {}}


def test_get_gets_405_with_allow_post(client: Client) -> None:
    response = client.raw(b"", method="GET")
    assert response.status == 405
    assert response.headers["allow"] == "POST"
    assert body(response)["error"]["code"] == -32600


def test_delete_gets_405_with_allow_post(client: Client) -> None:
    response = client.raw(b"", method="DELETE")
    assert response.status == 405
    assert response.headers["allow"] == "POST"


def test_no_response_carries_a_session_id_even_when_the_request_has_one(client: Client) -> None:
    init = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "c"}}
    responses = [
        client.post(
            {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init},
            {"mcp-session-id": "abc"},
        ),
        client.modern("tools/list", headers={"mcp-session-id": "abc"}),
        client.raw(b"", method="GET"),
    ]
    assert responses[0].status == 200
    assert responses[1].status == 200
    for response in responses:
        assert "mcp-session-id" not in response.headers


def test_foreign_origin_gets_403_with_a_json_rpc_error_without_id(client: Client) -> None:
    response = client.post(
        {"jsonrpc": "2.0", "id": 5, "method": "ping"}, {"origin": "https://evil.example.com"}
    )
    assert response.status == 403
    error = body(response)
    assert error["id"] is None
    assert error["error"]["code"] == -32600
    assert "Origin" in error["error"]["message"]


def test_only_the_servers_own_origin_passes_not_another_loopback_port(client: Client) -> None:
    """A page on another local port is not a caller Kiln agreed to (it would read the answers)."""
    message = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    assert client.post(message, {"origin": "http://127.0.0.1:8000"}).status == 200  # the Host
    for origin in ("http://localhost:3000", "http://127.0.0.1:8001", "http://[::1]:9"):
        assert client.post(message, {"origin": origin}).status == 403, origin


def test_configured_origin_is_allowed_and_others_are_not(backend: FakeBackend) -> None:
    settings = ProtocolSettings(allowed_origins=("https://app.example.com",))
    client = Client(McpEndpoint(backend, settings))
    message = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    assert client.post(message, {"origin": "https://app.example.com"}).status == 200
    assert client.post(message, {"origin": "http://localhost:3000"}).status == 403


def test_request_without_origin_is_not_rejected(client: Client) -> None:
    assert client.legacy("ping").status == 200


def test_foreign_host_on_a_loopback_bind_gets_421(client: Client) -> None:
    response = client.post(
        {"jsonrpc": "2.0", "id": 1, "method": "ping"}, {"host": "evil.example.com"}
    )
    assert response.status == 421
    assert body(response)["error"]["code"] == -32600


@pytest.mark.parametrize("host", ["localhost:8000", "127.0.0.1", "[::1]:8000", "LOCALHOST"])
def test_loopback_host_names_are_served_on_a_loopback_bind(client: Client, host: str) -> None:
    assert client.post({"jsonrpc": "2.0", "id": 1, "method": "ping"}, {"host": host}).status == 200


def test_any_host_is_served_when_not_bound_to_loopback(backend: FakeBackend) -> None:
    client = Client(McpEndpoint(backend, ProtocolSettings()))
    response = client.post({"jsonrpc": "2.0", "id": 1, "method": "ping"}, {"host": "mcp.example"})
    assert response.status == 200


def test_body_that_is_not_json_gets_400_parse_error(client: Client) -> None:
    response = client.raw(b'{"jsonrpc": "2.0", "id": 1,')
    assert response.status == 400
    assert body(response) == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": -32700, "message": "Parse error: the body is not valid JSON"},
    }


@pytest.mark.parametrize("raw", [b"\xff\xfe", b"NaN", b'{"a": Infinity}'])
def test_invalid_utf8_and_non_finite_numbers_are_parse_errors(client: Client, raw: bytes) -> None:
    response = client.raw(raw)
    assert (response.status, body(response)["error"]["code"]) == (400, -32700)


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", ""])
def test_wrong_content_type_gets_415(client: Client, content_type: str) -> None:
    response = client.raw(
        b'{"jsonrpc":"2.0","id":1,"method":"ping"}', {"content-type": content_type}
    )
    assert response.status == 415
    assert body(response)["error"]["code"] == -32600


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


@pytest.mark.parametrize("version", ["2025-06-18", "2025-11-25"])
def test_batch_with_a_post_2025_03_26_header_gets_400_invalid_request(
    client: Client, version: str
) -> None:
    batch = [{"jsonrpc": "2.0", "id": 1, "method": "ping"}]
    response = client.post(batch, {"mcp-protocol-version": version})
    assert response.status == 400
    assert body(response)["error"]["code"] == -32600


def test_batch_of_two_requests_without_header_gets_an_array_of_two_responses(
    client: Client,
) -> None:
    batch = [
        {"jsonrpc": "2.0", "id": 1, "method": "ping"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
    ]
    response = client.post(batch)
    assert response.status == 200
    assert response.headers["content-type"] == "application/json"
    replies = body(response)
    assert [r["id"] for r in replies] == [1, 2]
    assert replies[0]["result"] == {}
    assert replies[1]["result"]["tools"][0]["name"] == "add_vat"


def test_batch_of_only_notifications_gets_202(client: Client) -> None:
    batch = [
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}},
    ]
    response = client.post(batch, {"mcp-protocol-version": "2025-03-26"})
    assert (response.status, response.body) == (202, b"")


def test_batch_mixing_a_request_and_a_notification_answers_only_the_request(
    client: Client,
) -> None:
    batch = [
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": "p", "method": "ping"},
    ]
    assert body(client.post(batch)) == [{"jsonrpc": "2.0", "id": "p", "result": {}}]


def test_batch_with_initialize_gets_400_invalid_request(client: Client) -> None:
    init = {"protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "c"}}
    batch = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init},
        {"jsonrpc": "2.0", "id": 2, "method": "ping"},
    ]
    response = client.post(batch)
    assert response.status == 400
    assert body(response)["error"]["code"] == -32600
    assert "initialize" in body(response)["error"]["message"]


@pytest.mark.parametrize("size", [0, 21])
def test_empty_or_oversized_batch_gets_one_invalid_request_error(client: Client, size: int) -> None:
    batch = [{"jsonrpc": "2.0", "id": i, "method": "ping"} for i in range(size)]
    response = client.post(batch)
    assert response.status == 400
    error = body(response)
    assert isinstance(error, dict)
    assert error["error"]["code"] == -32600
    assert "1 to 20" in error["error"]["message"]


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
