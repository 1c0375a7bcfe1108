"""RFC 9728 documents and the URLs that name each protected resource."""

from __future__ import annotations

import pytest

from kiln.identity.metadata import (
    metadata_url,
    protected_resource_metadata,
    resource_path_for,
    resource_url,
)
from kiln.identity.tokens import ScopeNames


def test_oauth_mode_document_names_the_issuer_and_the_resource() -> None:
    document = protected_resource_metadata(
        base_url="https://kiln.example/",
        resource_path="/mcp",
        authorization_servers=["https://login.example"],
    )
    assert document["resource"] == "https://kiln.example/mcp"
    assert document["authorization_servers"] == ["https://login.example"]
    assert document["scopes_supported"] == ["kiln:call", "kiln:author"]
    assert document["bearer_methods_supported"] == ["header"]


def test_keys_only_document_has_no_authorization_servers() -> None:
    document = protected_resource_metadata(base_url="https://kiln.example", resource_path="")
    assert document["resource"] == "https://kiln.example"
    assert "authorization_servers" not in document


def test_configured_scope_names_are_listed() -> None:
    document = protected_resource_metadata(
        base_url="https://k", resource_path="/admin/mcp", scopes=ScopeNames("run", "admin")
    )
    assert document["scopes_supported"] == ["run", "admin"]


def test_urls_are_canonical_without_trailing_slashes() -> None:
    assert resource_url("https://k/", "/mcp") == "https://k/mcp"
    assert resource_url("https://k/stage/", "") == "https://k/stage"
    assert metadata_url("https://k/", "/admin/mcp") == (
        "https://k/.well-known/oauth-protected-resource/admin/mcp"
    )


@pytest.mark.parametrize(
    ("path", "resource"),
    [
        ("/.well-known/oauth-protected-resource", ""),
        ("/.well-known/oauth-protected-resource/", ""),
        ("/.well-known/oauth-protected-resource/mcp", "/mcp"),
        ("/.well-known/oauth-protected-resource/admin/mcp", "/admin/mcp"),
        ("/.well-known/oauth-protected-resource/api", None),
        ("/.well-known/oauth-protected-resourcex", None),
        ("/mcp", None),
    ],
)
def test_well_known_paths_map_to_our_resources_only(path: str, resource: str | None) -> None:
    assert resource_path_for(path) == resource
