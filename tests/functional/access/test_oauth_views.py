"""With OAuth on, a view's `oauth_scopes` and `oauth_clients` bind tokens to it (both wires)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import AwsStack
from kiln.access.view_store import ViewStore
from kiln.access.views import check_view
from kiln.catalog.rules import check_draft
from kiln.catalog.store import CatalogStore
from kiln.identity.settings import AuthSettings
from kiln.settings import Settings
from support.app import AUTHOR_KEY, RunningKiln, serve
from support.auth import Issuer, running_issuer

BASE = "https://kiln.example"
MODERN = "2026-07-28"


@pytest.fixture
def issuer() -> Iterator[Issuer]:
    with running_issuer() as running:
        yield running


@pytest.fixture
def kiln(aws: AwsStack, issuer: Issuer, tmp_path: Path) -> Iterator[RunningKiln]:
    store = CatalogStore(aws.clients.dynamodb, aws.clients.s3, table=aws.table, bucket=aws.bucket)
    for name in ("inside", "outside"):
        store.create(check_draft({"name": name, "description": "d", "language": "python",
                                  "code": f"print({name!r})\n"}))  # fmt: skip
    ViewStore(aws.clients.dynamodb, table=aws.table).put(
        check_view(
            {
                "name": "partners",
                "tools": ["inside"],
                "oauth_scopes": ["kiln:view:partners"],
                "oauth_clients": ["partner-app"],
            }
        ),
        expected_revision=None,
    )
    settings = Settings(
        table=aws.table, bucket=aws.bucket, endpoint_url=aws.endpoint_url, region="us-east-1",
        public_anonymous=False, bind_host="127.0.0.1", public_base_url=BASE,
        author_key=AUTHOR_KEY, bundle_cache_dir=tmp_path,
        auth=AuthSettings(oauth_issuer=issuer.url, oauth_jwks_url=issuer.jwks_url),
    )  # fmt: skip
    yield from serve(settings, aws)


def request(kiln: RunningKiln, token: str, method: str, params: dict[str, Any], wire: str) -> Any:
    headers = {"Authorization": f"Bearer {token}"}
    if wire == "modern":
        params = {**params, "_meta": {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "t"},
        }}  # fmt: skip
        headers.update({"MCP-Protocol-Version": MODERN, "Mcp-Method": method})
        if "name" in params:
            headers["Mcp-Name"] = params["name"]
    else:
        headers["MCP-Protocol-Version"] = "2025-11-25"
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    return kiln.mcp(body, headers=headers)


@pytest.mark.parametrize("wire", ["legacy", "modern"])
def test_a_token_with_a_views_scope_or_client_sees_only_that_view(
    kiln: RunningKiln, issuer: Issuer, wire: str
) -> None:
    scoped = issuer.token(aud=f"{BASE}/mcp", scope="kiln:call kiln:view:partners")
    client = issuer.token(aud=f"{BASE}/mcp", extra={"client_id": "partner-app"})
    plain = issuer.token(aud=f"{BASE}/mcp")
    for token in (scoped, client):
        listed = request(kiln, token, "tools/list", {}, wire).json()["result"]["tools"]
        assert [t["name"] for t in listed] == ["inside"]
        hidden = request(kiln, token, "tools/call", {"name": "outside", "arguments": {}}, wire)
        assert hidden.json()["error"]["message"] == "Unknown tool: outside"
    listed = request(kiln, plain, "tools/list", {}, wire).json()["result"]["tools"]
    assert sorted(t["name"] for t in listed) == ["inside", "outside"]
