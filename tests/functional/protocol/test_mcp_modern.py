"""Digest §7 items 30-53 (the 2026-07-28 era and both eras together) through real HTTP."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest

from support.app import MODERN, McpServer, meta, start_kiln


@pytest.fixture(scope="module")
def server(moto_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[McpServer]:
    yield from start_kiln(moto_endpoint, tmp_path_factory.mktemp("bundles"))


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
