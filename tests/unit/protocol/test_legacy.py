"""Digest §7 items 12-19: the legacy (initialize) era."""

from __future__ import annotations

import pytest

from support.protocol import Client, body

LEGACY = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"]


def initialize(client: Client, version: str, *, header: str | None = None) -> dict:
    params = {
        "protocolVersion": version,
        "capabilities": {},
        "clientInfo": {"name": "test-client", "version": "1.0"},
    }
    response = client.legacy("initialize", params, version=header)
    assert response.status == 200
    return body(response)["result"]


@pytest.mark.parametrize("version", ["1999-01-01", "2026-07-28", "banana"])
def test_initialize_with_an_unknown_version_gets_the_latest_legacy_one(
    client: Client, version: str
) -> None:
    assert initialize(client, version)["protocolVersion"] == "2025-11-25"


@pytest.mark.parametrize("version", LEGACY)
def test_initialize_result_offers_tools_and_logging_without_list_changed(
    client: Client, version: str
) -> None:
    result = initialize(client, version)
    # logging: a tool's log lines go out as events on its call's answer (talking.py)
    assert result["capabilities"] == {"tools": {}, "logging": {}}
    assert isinstance(result["serverInfo"]["name"], str)
    assert isinstance(result["serverInfo"]["version"], str)
    assert "resultType" not in result
    assert "tasks" not in result["capabilities"]


def test_server_info_fields_follow_the_negotiated_version(client: Client) -> None:
    old = initialize(client, "2025-03-26")["serverInfo"]
    mid = initialize(client, "2025-06-18")["serverInfo"]
    new = initialize(client, "2025-11-25")["serverInfo"]
    assert set(old) == {"name", "version"}
    assert set(mid) == {"name", "version", "title"}
    assert {"name", "version", "title", "description"} <= set(new)
    for icon in new.get("icons", []):
        assert "src" in icon


def test_initialize_carries_the_configured_instructions(client: Client) -> None:
    assert initialize(client, "2025-11-25")["instructions"] == "Use add_vat."


def test_initialize_without_a_protocol_version_gets_invalid_params(client: Client) -> None:
    response = client.legacy("initialize", {"capabilities": {}}, version=None)
    assert response.status == 200
    error = body(response)["error"]
    assert error["code"] == -32602
    assert "protocolVersion" in error["message"]


def test_tools_list_without_header_or_initialize_is_served_as_2025_03_26(client: Client) -> None:
    response = client.legacy("tools/list", version=None)
    assert response.status == 200
    tools = body(response)["result"]["tools"]
    assert tools[0]["name"] == "add_vat"


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
