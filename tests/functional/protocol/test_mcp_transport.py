"""Digest §7 items 1-11 through real HTTP into the app (uvicorn on loopback)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from support.app import McpServer, start_kiln

PING = {"jsonrpc": "2.0", "id": 1, "method": "ping"}


@pytest.fixture(scope="module")
def server(moto_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[McpServer]:
    yield from start_kiln(moto_endpoint, tmp_path_factory.mktemp("bundles"))


def test_a_page_on_another_loopback_port_is_refused_on_a_loopback_bind(server: McpServer) -> None:
    """Another local port is another program (a dev server, a page a tool opened): its page
    would read tools and call them anonymously, with the answers. KILN_ALLOWED_ORIGINS
    admits one (the MCP Inspector at http://localhost:6274, say)."""
    refused = server.post(PING, {"Origin": "http://localhost:6274"})
    assert refused.status_code == 403, refused.text
    assert "Origin" in refused.json()["error"]["message"]


def test_foreign_host_on_a_loopback_bind_gets_a_4xx(server: McpServer) -> None:
    response = server.post(PING, {"Host": "evil.example.com"})
    assert response.status_code == 421
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


def test_batch_containing_initialize_gets_400(server: McpServer) -> None:
    init = {"protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "c"}}
    batch = [{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init}, PING]
    response = server.post(batch)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == -32600
