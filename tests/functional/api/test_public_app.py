"""The public function's app (bare Starlette): /mcp and the OAuth metadata, nothing else."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from conftest import AwsStack
from kiln.catalog.rules import check_draft
from kiln.settings import Settings
from support.app import RunningKiln, serve
from support.tools import ECHO

MCP = {"MCP-Protocol-Version": "2025-11-25"}


@pytest.fixture
def public(kiln_settings: Settings, aws: AwsStack) -> Iterator[RunningKiln]:
    yield from serve(kiln_settings, aws, public_only=True)


def test_the_public_app_lists_and_calls_tools_on_mcp(public: RunningKiln) -> None:
    public.kiln.store.create(check_draft(ECHO), actor="test")
    listed = public.mcp({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, headers=MCP)
    assert listed.status_code == 200
    assert [t["name"] for t in listed.json()["result"]["tools"]] == ["echo"]
    call = {"name": "echo", "arguments": {"text": "hi"}}
    called = public.mcp(
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": call}, headers=MCP
    )
    assert called.json()["result"]["content"][0]["text"].strip() == "hi"


def test_the_public_app_serves_no_rest_api_no_admin_mcp_and_no_studio(public: RunningKiln) -> None:
    # /connect (the connect pages) and /api/connections: the admin function (template.yaml).
    paths = ("/api/tools", "/api/health", "/admin/mcp", "/studio", "/api/docs",
             "/connect/callback", "/connect/abc", "/api/connections")  # fmt: skip
    for path in paths:
        assert public.api("GET", path).status_code == 404, path


def test_the_public_app_serves_the_protected_resource_metadata(public: RunningKiln) -> None:
    answer = public.api("GET", "/.well-known/oauth-protected-resource/mcp", key=None)
    assert answer.status_code == 200
    assert answer.json()["resource"].endswith("/mcp")


def test_the_public_app_refuses_a_foreign_origin_with_a_json_rpc_error(
    public: RunningKiln,
) -> None:
    refused = public.mcp(
        {"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        headers={**MCP, "Origin": "https://evil.example"},
    )
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == -32600


def test_a_path_below_mcp_gets_a_json_rpc_404_from_the_public_app(public: RunningKiln) -> None:
    for path in ("/mcp/", "/mcp/extra"):
        answer = public.mcp({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, path=path)
        assert answer.status_code == 404, path
        assert answer.json()["error"]["code"] < 0, path


def test_an_unpublished_view_is_not_found_on_the_public_app(public: RunningKiln) -> None:
    answer = public.mcp({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, path="/mcp/v/none")
    assert answer.status_code == 404
    assert "no MCP endpoint" in answer.json()["error"]["message"]
