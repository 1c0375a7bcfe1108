"""Digest §7 items 12-19: the legacy (initialize) era."""

from __future__ import annotations

from support.protocol import Client, body


def initialize(client: Client, version: str, *, header: str | None = None) -> dict:
    params = {
        "protocolVersion": version,
        "capabilities": {},
        "clientInfo": {"name": "test-client", "version": "1.0"},
    }
    response = client.legacy("initialize", params, version=header)
    assert response.status == 200
    return body(response)["result"]


def test_initialize_carries_the_configured_instructions(client: Client) -> None:
    assert initialize(client, "2025-11-25")["instructions"] == "Use add_vat."


def test_initialize_without_a_protocol_version_gets_invalid_params(client: Client) -> None:
    response = client.legacy("initialize", {"capabilities": {}}, version=None)
    assert response.status == 200
    error = body(response)["error"]
    assert error["code"] == -32602
    assert "protocolVersion" in error["message"]


def test_server_discover_without_a_modern_claim_is_a_legacy_unknown_method(client: Client) -> None:
    response = client.legacy("server/discover", version=None)
    assert response.status == 200
    assert body(response)["error"]["code"] == -32601


def test_version_header_whitespace_is_ignored(client: Client) -> None:
    assert client.legacy("ping", version="  2025-06-18 ").status == 200


def test_message_without_jsonrpc_2_0_gets_invalid_request(client: Client) -> None:
    response = client.post({"id": 4, "method": "ping"})
    assert response.status == 400
    assert body(response)["id"] == 4
    assert body(response)["error"]["code"] == -32600


def test_params_that_are_not_an_object_get_invalid_request(client: Client) -> None:
    response = client.post({"jsonrpc": "2.0", "id": 4, "method": "tools/list", "params": [1]})
    assert response.status == 400
    assert body(response)["error"]["code"] == -32600
