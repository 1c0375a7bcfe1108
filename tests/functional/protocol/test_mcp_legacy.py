"""Digest §7 items 12-19 through real HTTP into the app."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from support.app import McpServer, start_kiln


@pytest.fixture(scope="module")
def server(moto_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[McpServer]:
    yield from start_kiln(
        moto_endpoint, tmp_path_factory.mktemp("bundles"), instructions="Call add_vat for VAT."
    )


def initialize(server: McpServer, version: str) -> dict:
    params = {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "c"}}
    response = server.legacy("initialize", params, version=None)
    assert response.status_code == 200
    return response.json()["result"]


@pytest.mark.parametrize("version", ["1999-01-01", "2026-07-28"])
def test_initialize_with_an_unknown_version_gets_2025_11_25(
    server: McpServer, version: str
) -> None:
    assert initialize(server, version)["protocolVersion"] == "2025-11-25"


def test_initialize_result_offers_tools_tasks_and_logging_and_names_the_server(
    server: McpServer,
) -> None:
    result = initialize(server, "2025-11-25")
    tasks = {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}
    # logging: a tool's log lines go out as events on its call's answer
    assert result["capabilities"] == {"tools": {}, "tasks": tasks, "logging": {}}
    assert initialize(server, "2025-06-18")["capabilities"] == {"tools": {}, "logging": {}}
    assert result["serverInfo"]["name"] == "kiln"
    assert isinstance(result["serverInfo"]["version"], str)
    assert result["instructions"] == "Call add_vat for VAT."


def test_2025_11_25_server_info_has_title_and_description(server: McpServer) -> None:
    info = initialize(server, "2025-11-25")["serverInfo"]
    assert isinstance(info["title"], str)
    assert isinstance(info["description"], str)
    assert set(initialize(server, "2025-03-26")["serverInfo"]) == {"name", "version"}


def test_tools_list_without_header_or_initialize_is_served(server: McpServer) -> None:
    response = server.legacy("tools/list", version=None)
    assert response.status_code == 200
    assert "add_vat" in [t["name"] for t in response.json()["result"]["tools"]]
