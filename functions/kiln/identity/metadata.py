"""RFC 9728 Protected Resource Metadata, and the URLs that name each protected resource.

Kiln protects three resources: the root (the REST API under /api), `/mcp` and `/admin/mcp`.
Each has its document at `/.well-known/oauth-protected-resource<path>`; the root's has no
suffix. In OAuth mode `authorization_servers` names the configured issuer. In keys-only mode
there is no authorization server: the document is still served (so the URL in every 401
resolves) but `authorization_servers` is left out, which tells a client that no OAuth flow
exists and a Kiln API key must be supplied as the bearer token.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kiln.identity.tokens import ScopeNames

WELL_KNOWN = "/.well-known/oauth-protected-resource"
RESOURCE_PATHS = ("", "/mcp", "/admin/mcp")


def resource_url(base_url: str, resource_path: str) -> str:
    """The canonical URI of a resource (RFC 8707: no trailing slash, no fragment)."""
    return base_url.rstrip("/") + resource_path


def metadata_url(base_url: str, resource_path: str) -> str:
    return base_url.rstrip("/") + WELL_KNOWN + resource_path


def resource_path_for(well_known_path: str) -> str | None:
    """Which resource a well-known request asks about, or None when it names none of ours."""
    if not well_known_path.startswith(WELL_KNOWN):
        return None
    suffix = well_known_path[len(WELL_KNOWN) :].rstrip("/")
    return suffix if suffix in RESOURCE_PATHS else None


def protected_resource_metadata(
    *,
    base_url: str,
    resource_path: str,
    authorization_servers: Sequence[str] = (),
    scopes: ScopeNames = ScopeNames(),  # noqa: B008 (frozen, immutable)
) -> dict[str, Any]:
    document: dict[str, Any] = {"resource": resource_url(base_url, resource_path)}
    if authorization_servers:
        document["authorization_servers"] = list(authorization_servers)
    document["scopes_supported"] = [scopes.call, scopes.author]
    document["bearer_methods_supported"] = ["header"]
    document["resource_name"] = "Kiln MCP tools"
    return document
