"""Digest §7 items 30-53 (the 2026-07-28 era and both eras together) through real HTTP."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from support.app import MODERN, SERVER_INFO, McpServer, b64, meta, start_kiln


@pytest.fixture(scope="module")
def server(moto_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[McpServer]:
    yield from start_kiln(moto_endpoint, tmp_path_factory.mktemp("bundles"))


def rejected(response: httpx.Response, status: int, code: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    payload = response.json()
    assert payload["error"]["code"] == code
    return payload


def test_discover_gets_versions_capabilities_and_cache_hints(server: McpServer) -> None:
    response = server.modern("server/discover")
    assert response.status_code == 200
    result = response.json()["result"]
    assert result["resultType"] == "complete"
    assert "2026-07-28" in result["supportedVersions"]
    assert "tools" in result["capabilities"]
    assert isinstance(result["ttlMs"], int)
    assert result["ttlMs"] >= 0
    assert result["cacheScope"] in {"public", "private"}


def test_discover_has_server_info_in_meta_only(server: McpServer) -> None:
    result = server.modern("server/discover").json()["result"]
    assert result["_meta"][SERVER_INFO]["name"] == "kiln"
    assert isinstance(result["_meta"][SERVER_INFO]["version"], str)
    assert "serverInfo" not in result


def test_request_without_meta_gets_400_invalid_params(server: McpServer) -> None:
    message = {"jsonrpc": "2.0", "id": 9, "method": "server/discover", "params": {}}
    response = server.post(
        message, {"MCP-Protocol-Version": MODERN, "Mcp-Method": "server/discover"}
    )
    assert rejected(response, 400, -32602)["id"] == 9


def test_header_and_body_versions_that_differ_get_400_header_mismatch(server: McpServer) -> None:
    rejected(server.modern("server/discover", {"_meta": meta("v999.0.0")}), 400, -32020)


def test_unsupported_version_gets_400_with_supported_and_requested(server: McpServer) -> None:
    response = server.modern(
        "server/discover",
        {"_meta": meta("v999.0.0")},
        headers={"MCP-Protocol-Version": "v999.0.0"},
    )
    data = rejected(response, 400, -32022)["error"]["data"]
    assert data["requested"] == "v999.0.0"
    supported = server.modern("server/discover").json()["result"]["supportedVersions"]
    assert set(data["supported"]) <= set(supported)


def test_missing_or_different_mcp_method_gets_400_header_mismatch(server: McpServer) -> None:
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": meta()}}
    rejected(server.post(message, {"MCP-Protocol-Version": MODERN}), 400, -32020)
    rejected(server.modern("tools/list", headers={"Mcp-Method": "tools/call"}), 400, -32020)
    rejected(server.modern("tools/list", headers={"Mcp-Method": "TOOLS/LIST"}), 400, -32020)


def test_mcp_name_must_match_but_may_be_base64(server: McpServer) -> None:
    params = {"name": "add_vat", "arguments": {"net": 1}}
    rejected(server.modern("tools/call", params, name="echo"), 400, -32020)
    response = server.modern("tools/call", params, name=b64("add_vat"))
    assert response.status_code == 200
    assert response.json()["result"]["isError"] is False


def test_mcp_name_surrounded_by_spaces_is_accepted(server: McpServer) -> None:
    # httpx refuses padded header values, so this one goes out through http.client.
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "add_vat", "arguments": {"net": 1}, "_meta": meta()},
    }
    url = urlsplit(server.url)
    connection = http.client.HTTPConnection(url.hostname or "", url.port, timeout=30)
    try:
        connection.request(
            "POST",
            url.path,
            body=json.dumps(body),
            headers={
                "Content-Type": "application/json",
                "MCP-Protocol-Version": MODERN,
                "Mcp-Method": "tools/call",
                "Mcp-Name": "  add_vat  ",
            },
        )
        response = connection.getresponse()
        assert response.status == 200
        assert json.loads(response.read())["result"]["isError"] is False
    finally:
        connection.close()


def test_discover_advertises_tools_and_the_tasks_extension_and_no_subscriptions(
    server: McpServer,
) -> None:
    capabilities = server.modern("server/discover").json()["result"]["capabilities"]
    assert "listChanged" not in capabilities["tools"]
    assert set(capabilities) == {"tools", "extensions"}
    assert capabilities["extensions"] == {"io.modelcontextprotocol/tasks": {}}


def test_tools_list_is_complete_cacheable_and_in_a_stable_order(server: McpServer) -> None:
    first = server.modern("tools/list").json()["result"]
    second = server.modern("tools/list", rid=2).json()["result"]
    assert first["resultType"] == "complete"
    assert isinstance(first["ttlMs"], int)
    assert first["cacheScope"] in {"public", "private"}
    assert [t["name"] for t in first["tools"]] == [t["name"] for t in second["tools"]]


def test_every_result_meta_has_server_info(server: McpServer) -> None:
    for response in (
        server.modern("server/discover"),
        server.modern("tools/list"),
        server.modern("tools/call", {"name": "add_vat", "arguments": {"net": 5}}),
        server.modern("tools/call", {"name": "add_vat", "arguments": {}}),
    ):
        assert response.json()["result"]["_meta"][SERVER_INFO]["name"] == "kiln"


def test_no_response_is_a_request_to_the_client(server: McpServer) -> None:
    for response in (
        server.modern("server/discover"),
        server.modern("tools/list"),
        server.modern("tools/call", {"name": "add_vat", "arguments": {"net": 5}}),
    ):
        payload = response.json()
        assert not ("method" in payload and "id" in payload)


def test_a_request_state_kiln_did_not_seal_is_refused_and_stray_answers_ignored(
    server: McpServer,
) -> None:
    params = {
        "name": "add_vat",
        "arguments": {"net": 5},
        "requestState": "forged",
        "inputResponses": {"k": {"action": "accept"}},
    }
    response = server.modern("tools/call", params)
    assert response.status_code == 200
    assert response.json()["error"]["code"] == -32602
    del params["requestState"]
    assert server.modern("tools/call", params).json()["result"]["isError"] is False


def test_no_log_notification_is_sent(server: McpServer) -> None:
    response = server.modern("tools/call", {"name": "add_vat", "arguments": {"net": 5}})
    assert "notifications/message" not in response.text


def test_posted_response_or_batch_gets_400_invalid_request(server: McpServer) -> None:
    headers = {"MCP-Protocol-Version": MODERN}
    rejected(server.post({"jsonrpc": "2.0", "id": 1, "result": {}}, headers), 400, -32600)
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": meta()}}
    rejected(server.post([message], headers), 400, -32600)


def test_only_defined_mcp_error_codes_appear(server: McpServer) -> None:
    responses = [
        server.modern("server/discover", {"_meta": meta("v999.0.0")}),
        server.modern("tools/list", headers={"Mcp-Method": "x"}),
        server.modern("nope"),
        server.modern("tools/call", {"name": "nope"}),
        server.modern("tools/list", {"cursor": "bad"}),
    ]
    for response in responses:
        code = response.json()["error"]["code"]
        assert code != -32002
        assert not (-32099 <= code <= -32000) or code in {-32020, -32021, -32022}


def test_legacy_initialize_then_modern_discover_both_succeed(server: McpServer) -> None:
    init = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "c"}}
    assert server.legacy("initialize", init, version=None).json()["result"]["protocolVersion"]
    assert server.modern("server/discover").json()["result"]["supportedVersions"] == [MODERN]
