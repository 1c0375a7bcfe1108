"""Digest §7 items 30-51: the stateless 2026-07-28 era."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kiln.protocol import ToolView
from support.protocol import (
    MODERN,
    SERVER_INFO,
    Client,
    FakeBackend,
    b64,
    body,
    meta,
)


def error_of(response: Any) -> dict[str, Any]:
    payload = body(response)
    assert "result" not in payload
    return payload["error"]


def test_discover_gets_the_complete_cacheable_description(client: Client) -> None:
    response = client.modern("server/discover")
    assert response.status == 200
    result = body(response)["result"]
    assert result["resultType"] == "complete"
    assert "2026-07-28" in result["supportedVersions"]
    assert result["capabilities"] == {"tools": {}}
    assert isinstance(result["ttlMs"], int)
    assert result["ttlMs"] >= 0
    assert result["cacheScope"] in {"public", "private"}
    assert result["instructions"] == "Use add_vat."


def test_discover_puts_server_info_in_meta_not_the_body(client: Client) -> None:
    result = body(client.modern("server/discover"))["result"]
    info = result["_meta"][SERVER_INFO]
    assert isinstance(info["name"], str)
    assert isinstance(info["version"], str)
    assert "serverInfo" not in result


def test_modern_header_without_meta_gets_400_invalid_params(client: Client) -> None:
    message = {"jsonrpc": "2.0", "id": 3, "method": "server/discover", "params": {}}
    response = client.post(
        message, {"mcp-protocol-version": MODERN, "mcp-method": "server/discover"}
    )
    assert response.status == 400
    assert body(response)["id"] == 3
    assert error_of(response)["code"] == -32602


def test_modern_header_without_params_gets_400_invalid_params(client: Client) -> None:
    message = {"jsonrpc": "2.0", "id": 3, "method": "tools/list"}
    response = client.post(message, {"mcp-protocol-version": MODERN, "mcp-method": "tools/list"})
    assert (response.status, error_of(response)["code"]) == (400, -32602)


def test_body_version_differing_from_the_header_gets_400_header_mismatch(client: Client) -> None:
    response = client.modern("server/discover", {"_meta": meta("v999.0.0")})
    assert (response.status, error_of(response)["code"]) == (400, -32020)


def test_unsupported_version_in_header_and_body_gets_400_with_supported_list(
    client: Client,
) -> None:
    response = client.modern(
        "server/discover",
        {"_meta": meta("v999.0.0")},
        headers={"mcp-protocol-version": "v999.0.0"},
    )
    assert response.status == 400
    error = error_of(response)
    assert error["code"] == -32022
    assert error["data"]["requested"] == "v999.0.0"
    supported = body(client.modern("server/discover"))["result"]["supportedVersions"]
    assert set(error["data"]["supported"]) <= set(supported)


def test_modern_envelope_naming_a_legacy_version_gets_unsupported_version(
    client: Client,
) -> None:
    response = client.modern(
        "tools/list",
        {"_meta": meta("2025-11-25")},
        headers={"mcp-protocol-version": "2025-11-25"},
    )
    assert (response.status, error_of(response)["code"]) == (400, -32022)


def test_missing_mcp_method_gets_400_header_mismatch(client: Client) -> None:
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": meta()}}
    response = client.post(message, {"mcp-protocol-version": MODERN})
    assert (response.status, error_of(response)["code"]) == (400, -32020)
    assert "Mcp-Method" in error_of(response)["message"]


def test_mcp_method_differing_from_the_body_gets_400_header_mismatch(client: Client) -> None:
    response = client.modern("tools/list", headers={"mcp-method": "tools/call"})
    assert (response.status, error_of(response)["code"]) == (400, -32020)


def test_mcp_method_value_case_matters(client: Client) -> None:
    response = client.modern(
        "tools/call", {"name": "add_vat"}, headers={"mcp-method": "TOOLS/CALL"}
    )
    assert (response.status, error_of(response)["code"]) == (400, -32020)


def test_mcp_name_differing_from_the_body_gets_400_header_mismatch(client: Client) -> None:
    response = client.modern("tools/call", {"name": "add_vat", "arguments": {"net": 1}}, name="x")
    assert (response.status, error_of(response)["code"]) == (400, -32020)


@pytest.mark.parametrize("name", ["  add_vat ", "\tadd_vat", b64("add_vat")])
def test_mcp_name_with_whitespace_or_base64_is_accepted(client: Client, name: str) -> None:
    response = client.modern("tools/call", {"name": "add_vat", "arguments": {"net": 1}}, name=name)
    assert response.status == 200
    assert body(response)["result"]["isError"] is False


def test_mcp_name_with_broken_base64_gets_400_header_mismatch(client: Client) -> None:
    response = client.modern(
        "tools/call", {"name": "add_vat", "arguments": {}}, name="=?base64?%%%?="
    )
    assert (response.status, error_of(response)["code"]) == (400, -32020)


def test_mcp_name_with_raw_non_ascii_gets_400_header_mismatch(client: Client) -> None:
    response = client.modern("tools/call", {"name": "café", "arguments": {}}, name="café")
    assert (response.status, error_of(response)["code"]) == (400, -32020)


def test_non_ascii_tool_name_in_base64_reaches_the_unknown_tool_check(client: Client) -> None:
    response = client.modern("tools/call", {"name": "café", "arguments": {}}, name=b64("café"))
    assert response.status == 200
    assert error_of(response)["code"] == -32602


def test_initialize_claiming_the_modern_envelope_is_not_answered_as_legacy(client: Client) -> None:
    params = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "c"}}
    response = client.modern("initialize", params)
    assert (response.status, error_of(response)["code"]) == (404, -32601)


def test_discover_advertises_nothing_that_would_need_subscriptions(client: Client) -> None:
    capabilities = body(client.modern("server/discover"))["result"]["capabilities"]
    assert "listChanged" not in capabilities["tools"]
    assert "resources" not in capabilities
    assert "prompts" not in capabilities


def test_tools_list_is_complete_cacheable_and_stable(client: Client, backend: FakeBackend) -> None:
    for i in range(5):
        backend.add(ToolView(name=f"t{i}", description="d", input_schema={"type": "object"}))
    first = body(client.modern("tools/list"))["result"]
    second = body(client.modern("tools/list"))["result"]
    assert first["resultType"] == "complete"
    assert isinstance(first["ttlMs"], int)
    assert first["ttlMs"] >= 0
    assert first["cacheScope"] in {"public", "private"}
    assert [t["name"] for t in first["tools"]] == [t["name"] for t in second["tools"]]


def test_every_modern_result_carries_server_info(client: Client) -> None:
    results = [
        body(client.modern("server/discover"))["result"],
        body(client.modern("tools/list"))["result"],
        body(client.modern("tools/call", {"name": "add_vat", "arguments": {"net": 5}}))["result"],
        body(client.modern("tools/call", {"name": "add_vat", "arguments": {"net": -5}}))["result"],
    ]
    for result in results:
        assert result["_meta"][SERVER_INFO]["name"] == "kiln"


def test_no_response_body_is_a_server_to_client_request(client: Client) -> None:
    for response in (
        client.modern("server/discover"),
        client.modern("tools/list"),
        client.modern("tools/call", {"name": "add_vat", "arguments": {"net": 5}}),
    ):
        payload = body(response)
        assert not ("method" in payload and "id" in payload)


def test_a_request_state_kiln_did_not_seal_is_refused_and_nothing_runs(
    client: Client, backend: FakeBackend
) -> None:
    params = {
        "name": "add_vat",
        "arguments": {"net": 5},
        "requestState": "forged-state",
        "inputResponses": {"x": {"action": "accept"}},
    }
    response = client.modern("tools/call", params)
    assert response.status == 200
    assert body(response)["error"]["code"] == -32602
    assert backend.calls == []


def test_input_responses_without_a_request_state_do_not_change_a_plain_call(
    client: Client, backend: FakeBackend
) -> None:
    params = {"name": "add_vat", "arguments": {"net": 5}, "inputResponses": {"x": {}}}
    response = client.modern("tools/call", params)
    assert body(response)["result"]["isError"] is False
    assert backend.calls == [("add_vat", {"net": 5})]


def test_no_log_notifications_are_ever_emitted(client: Client) -> None:
    response = client.modern("tools/call", {"name": "add_vat", "arguments": {"net": 5}})
    assert b"notifications/message" not in response.body


def test_posted_response_in_the_modern_era_gets_400_invalid_request(client: Client) -> None:
    response = client.post(
        {"jsonrpc": "2.0", "id": 1, "result": {}}, {"mcp-protocol-version": MODERN}
    )
    assert (response.status, error_of(response)["code"]) == (400, -32600)


def test_modern_batch_gets_400_invalid_request(client: Client) -> None:
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": meta()}}
    for headers in ({"mcp-protocol-version": MODERN}, {}):
        response = client.post([message], headers)
        assert (response.status, error_of(response)["code"]) == (400, -32600)


def test_only_defined_mcp_error_codes_are_emitted(client: Client) -> None:
    responses = [
        client.modern("server/discover", {"_meta": meta("v999.0.0")}),
        client.modern("tools/list", headers={"mcp-method": "x"}),
        client.modern("nope"),
        client.modern("tools/call", {"name": "nope"}),
        client.modern("tools/list", {"cursor": "bad"}),
        client.raw(b"{"),
    ]
    for response in responses:
        code = error_of(response)["code"]
        assert code != -32002
        assert not (-32099 <= code <= -32020) or code in {-32020, -32021, -32022}
        assert not (-32019 <= code <= -32000)


def test_invalid_cursor_in_the_modern_era_is_invalid_params_on_200(client: Client) -> None:
    response = client.modern("tools/list", {"cursor": "forged"})
    assert (response.status, error_of(response)["code"]) == (200, -32602)


def test_modern_result_json_round_trips(client: Client) -> None:
    raw = client.modern("tools/list").body
    assert json.loads(raw)["jsonrpc"] == "2.0"
