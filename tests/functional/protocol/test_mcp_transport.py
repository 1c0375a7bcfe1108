"""Digest §7 items 1-11 through real HTTP into the app (uvicorn on loopback)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from support.app import MODERN, McpServer, meta, start_kiln

PING = {"jsonrpc": "2.0", "id": 1, "method": "ping"}


@pytest.fixture(scope="module")
def server(moto_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[McpServer]:
    yield from start_kiln(moto_endpoint, tmp_path_factory.mktemp("bundles"))


def test_notification_gets_202_and_no_body(server: McpServer) -> None:
    response = server.post({"jsonrpc": "2.0", "method": "notifications/initialized"})
    assert response.status_code == 202
    assert response.content == b""


def test_modern_notification_gets_202_and_no_body(server: McpServer) -> None:
    message = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"_meta": meta()}}
    response = server.post(message, {"MCP-Protocol-Version": MODERN})
    assert (response.status_code, response.content) == (202, b"")


def test_request_gets_200_json_with_its_own_id(server: McpServer) -> None:
    response = server.legacy("ping", rid="abc")
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.json() == {"jsonrpc": "2.0", "id": "abc", "result": {}}


def test_get_gets_405_with_allow_post(server: McpServer) -> None:
    response = server.http.get(server.url, headers={"Accept": "text/event-stream"})
    assert response.status_code == 405
    assert response.headers["allow"] == "POST"
    assert response.json()["error"]["code"] == -32600


def test_delete_gets_405_with_allow_post(server: McpServer) -> None:
    response = server.http.delete(server.url, headers={"Mcp-Session-Id": "s-1"})
    assert response.status_code == 405
    assert response.headers["allow"] == "POST"


def test_no_response_carries_a_session_id_even_when_the_request_has_one(
    server: McpServer,
) -> None:
    init = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "c"}}
    responses = [
        server.post(
            {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init},
            {"Mcp-Session-Id": "abc"},
        ),
        server.modern("tools/list", headers={"Mcp-Session-Id": "abc"}),
        server.http.get(server.url),
    ]
    assert [r.status_code for r in responses] == [200, 200, 405]
    for response in responses:
        assert "mcp-session-id" not in response.headers


def test_foreign_origin_gets_403_with_a_json_rpc_error_without_id(server: McpServer) -> None:
    response = server.post(PING, {"Origin": "https://evil.example.com"})
    assert response.status_code == 403
    assert response.json()["id"] is None
    assert response.json()["error"]["code"] == -32600


def test_a_page_on_another_loopback_port_is_refused_on_a_loopback_bind(server: McpServer) -> None:
    """Another local port is another program (a dev server, a page a tool opened): its page
    would read tools and call them anonymously, with the answers. KILN_ALLOWED_ORIGINS
    admits one (the MCP Inspector at http://localhost:6274, say)."""
    refused = server.post(PING, {"Origin": "http://localhost:6274"})
    assert refused.status_code == 403, refused.text
    assert "Origin" in refused.json()["error"]["message"]


def test_request_without_origin_is_not_rejected(server: McpServer) -> None:
    assert server.post(PING).status_code == 200


def test_foreign_host_on_a_loopback_bind_gets_a_4xx(server: McpServer) -> None:
    response = server.post(PING, {"Host": "evil.example.com"})
    assert response.status_code == 421
    assert response.json()["error"]["code"] == -32600


def test_body_that_is_not_json_gets_400_parse_error(server: McpServer) -> None:
    response = server.post(None, raw=b'{"jsonrpc":')
    assert response.status_code == 400
    assert response.json()["error"]["code"] == -32700


def test_wrong_content_type_gets_415(server: McpServer) -> None:
    response = server.post(None, {"Content-Type": "text/plain"}, raw=b'{"x":1}')
    assert response.status_code == 415
    assert response.json()["error"]["code"] == -32600


def test_body_over_one_mebibyte_gets_413(server: McpServer) -> None:
    big = b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"pad":"' + b"x" * (1 << 20) + b'"}}'
    response = server.post(None, raw=big)
    assert response.status_code == 413
    assert response.json()["error"]["code"] == -32600


@pytest.mark.parametrize("version", ["2025-06-18", "2025-11-25"])
def test_batch_with_a_post_2025_03_26_header_gets_400(server: McpServer, version: str) -> None:
    response = server.post([PING], {"MCP-Protocol-Version": version})
    assert response.status_code == 400
    assert response.json()["error"]["code"] == -32600


def test_batch_of_two_requests_without_header_gets_an_array_of_two_responses(
    server: McpServer,
) -> None:
    batch = [PING, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}]
    response = server.post(batch)
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    replies = response.json()
    assert [r["id"] for r in replies] == [1, 2]
    assert replies[1]["result"]["tools"]


def test_batch_of_only_notifications_gets_202(server: McpServer) -> None:
    response = server.post([{"jsonrpc": "2.0", "method": "notifications/initialized"}])
    assert (response.status_code, response.content) == (202, b"")


def test_batch_containing_initialize_gets_400(server: McpServer) -> None:
    init = {"protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "c"}}
    batch = [{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init}, PING]
    response = server.post(batch)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == -32600


@pytest.mark.parametrize("size", [0, 21])
def test_empty_or_oversized_batch_gets_one_invalid_request_error(
    server: McpServer, size: int
) -> None:
    response = server.post([{**PING, "id": i} for i in range(size)])
    assert response.status_code == 400
    assert response.json()["error"]["code"] == -32600
