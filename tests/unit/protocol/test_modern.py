"""Digest §7 items 30-51: the stateless 2026-07-28 era."""

from __future__ import annotations

import json
from typing import Any

import pytest

from support.protocol import (
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


def test_modern_envelope_naming_a_legacy_version_gets_unsupported_version(
    client: Client,
) -> None:
    response = client.modern(
        "tools/list",
        {"_meta": meta("2025-11-25")},
        headers={"mcp-protocol-version": "2025-11-25"},
    )
    assert (response.status, error_of(response)["code"]) == (400, -32022)


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


def test_invalid_cursor_in_the_modern_era_is_invalid_params_on_200(client: Client) -> None:
    response = client.modern("tools/list", {"cursor": "forged"})
    assert (response.status, error_of(response)["code"]) == (200, -32602)


def test_modern_result_json_round_trips(client: Client) -> None:
    raw = client.modern("tools/list").body
    assert json.loads(raw)["jsonrpc"] == "2.0"
