"""Server cards (SEP-2127, a draft extension), the AI Catalog that lists them, and registry entries.

Pure: what a deployment is (`Deployment`) and which endpoints it serves (`Endpoint`) in, JSON
documents out. The HTTP half (ETag, 304, CORS) is `kiln.api.cards`; `kiln publish` turns a card
into a registry `server.json` with `registry_entry`.

The JSON Schemas these documents are checked against are Kiln's own statement of the published
rules (`kiln.protocol.card_schemas`; sources and versions in `schemas/README.md`); an official
schema file on disk can be checked as well (`validate(..., official=path)`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from kiln.protocol.card_paths import CARD_SUFFIX
from kiln.protocol.card_schemas import (
    CARD_SCHEMA_URL,
    NAME_REGEX,
    REGISTRY_SCHEMA_URL,
    card_schema,
    registry_schema,
)
from kiln.protocol.spec import KNOWN_PROTOCOL_VERSIONS

Kind = Literal["card", "registry"]  # which document `validate` checks
CARD_MEDIA_TYPE = "application/mcp-server-card+json"
CATALOG_MEDIA_TYPE = "application/ai-catalog+json"
EXTENSION = "https://github.com/modelcontextprotocol/experimental-ext-server-card"
# The card's own mark that it follows a draft: `_meta` is the card's extension point.
META_KEY = "kiln/card"
NAME_PATTERN = re.compile(NAME_REGEX)  # both schemas' `name`
NAME_RULE = "reverse-DNS 'namespace/server' (e.g. io.github.acme/weather), 3-200 characters"
MAX_TEXT = 100  # `description` and `title`, in both schemas


class CardError(ValueError):
    """A registry entry that cannot be made as asked (a bad name, a document the schema
    refuses); the message names the field and the rule."""


@dataclass(frozen=True)
class Deployment:
    """What every card of one deployment shares."""

    base_url: str  # how clients reach it (KILN_PUBLIC_BASE_URL, else the request's own)
    server_name: str  # serverInfo.name
    version: str  # serverInfo.version
    title: str | None
    description: str | None
    website_url: str | None
    oauth: bool  # an OAuth issuer is configured: a client may sign in instead of a key


@dataclass(frozen=True)
class Endpoint:
    """One MCP endpoint a card describes: the public one, or a published view's."""

    path: str  # /mcp or /mcp/v/<view>
    view: str | None
    anonymous: bool  # answers without a credential
    description: str = ""


def namespace(base_url: str) -> str:
    """The deployment's reverse-DNS namespace: its host's labels reversed, port left out
    (`https://tools.example.com` → `com.example.tools`)."""
    host = (urlsplit(base_url).hostname or "localhost").strip("[]")
    if ":" in host:  # an IPv6 literal has no labels to reverse
        return "ipv6-" + re.sub(r"[^a-zA-Z0-9]", "-", host)
    return ".".join(reversed([label for label in host.split(".") if label]))


def card_name(deployment: Deployment, endpoint: Endpoint) -> str:
    """`<namespace>/<server>` for the public endpoint, `<namespace>/<server>.<view>` for a view
    (a view name has no dot, so no view's card can take the public endpoint's name)."""
    server = deployment.server_name
    if endpoint.view is not None:
        server = f"{server}.{endpoint.view}"
    return f"{namespace(deployment.base_url)}/{server}"


def endpoint_url(deployment: Deployment, endpoint: Endpoint) -> str:
    return deployment.base_url.rstrip("/") + endpoint.path


def card_url(deployment: Deployment, endpoint: Endpoint) -> str:
    return endpoint_url(deployment, endpoint) + CARD_SUFFIX


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 1].rstrip() + "…"


def _auth_header(deployment: Deployment, endpoint: Endpoint) -> dict[str, Any]:
    how = "a Kiln API key" + (" or an OAuth access token" if deployment.oauth else "")
    return {
        "name": "Authorization",
        "description": f"Bearer credential: {how}",
        # With OAuth a client may sign in instead (the 401 names the resource metadata)
        "isRequired": not deployment.oauth,
        "isSecret": True,
        "value": "Bearer {token}",
        "variables": {
            "token": {"description": f"{how[0].upper()}{how[1:]}", "isRequired": True,
                      "isSecret": True},
        },
    }  # fmt: skip


def card(deployment: Deployment, endpoint: Endpoint) -> dict[str, Any]:
    """The endpoint's Server Card: identity and connection, never its tools."""
    remote: dict[str, Any] = {
        "type": "streamable-http",
        "url": endpoint_url(deployment, endpoint),
        "supportedProtocolVersions": list(KNOWN_PROTOCOL_VERSIONS),
    }
    if not endpoint.anonymous:
        remote["headers"] = [_auth_header(deployment, endpoint)]
    if endpoint.view is None:
        description = deployment.description or "MCP tools served by Kiln"
        title = deployment.title
    else:
        description = endpoint.description or f"The tools of the view '{endpoint.view}'"
        title = f"{deployment.title or deployment.server_name}: {endpoint.view}"
    document: dict[str, Any] = {
        "$schema": CARD_SCHEMA_URL,
        "name": card_name(deployment, endpoint),
        "version": deployment.version,
        "description": _short(description),
    }
    if title:
        document["title"] = _short(title)
    if deployment.website_url:
        document["websiteUrl"] = deployment.website_url
    document["remotes"] = [remote]
    document["_meta"] = {
        META_KEY: {
            "status": "experimental",  # SEP-2127 is a draft: the shape may still change
            "extension": EXTENSION,
            "auth": {
                "required": not endpoint.anonymous,
                "oauth": deployment.oauth,
                "resourceMetadata": deployment.base_url.rstrip("/")
                + "/.well-known/oauth-protected-resource/mcp",
            },
        }
    }
    return document


def catalog(deployment: Deployment, endpoints: list[Endpoint]) -> dict[str, Any]:
    """The deployment's AI Catalog: one entry per card, each by its URL."""
    host = urlsplit(deployment.base_url).hostname or "localhost"
    entries = []
    for endpoint in endpoints:
        server = card_name(deployment, endpoint).split("/", 1)[1]
        entries.append(
            {
                "identifier": f"urn:air:{host}:mcp:{server}",
                "type": CARD_MEDIA_TYPE,
                "url": card_url(deployment, endpoint),
            }
        )
    return {"specVersion": "1.0", "entries": entries}


def check_name(name: str) -> str:
    if not (3 <= len(name) <= 200 and NAME_PATTERN.match(name)):
        raise CardError(f"name {name!r}: must be {NAME_RULE}")
    return name


def registry_entry(
    card_document: dict[str, Any], *, name: str, version: str, official: Path | None = None
) -> dict[str, Any]:
    """A registry `server.json` (schema 2025-12-11) for the endpoint a card describes: its
    URL under `remotes`, with the header its auth needs; validated before it is returned,
    against Kiln's schema and, when given, an official schema file too."""
    remotes = []
    for remote in card_document.get("remotes", []):
        # the registry's RemoteTransport has no supportedProtocolVersions
        remotes.append({k: v for k, v in remote.items() if k in ("type", "url", "headers")})
    entry: dict[str, Any] = {
        "$schema": REGISTRY_SCHEMA_URL,
        "name": check_name(name),
        "description": card_document["description"],
        "version": version,
    }
    for field in ("title", "websiteUrl"):
        if field in card_document:
            entry[field] = card_document[field]
    entry["remotes"] = remotes
    validate(entry, "registry", official=official)
    return entry


def official_schema(path: Path) -> dict[str, Any]:
    """A published schema file read from disk (never kept in the repository): the card
    schema's file is a bundle of `$defs`, of which the card is `ServerCard`."""
    try:
        root: dict[str, Any] = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError) as error:
        raise CardError(f"official schema {path}: cannot be read as JSON ({error})") from None
    if "properties" not in root and "ServerCard" in root.get("$defs", {}):
        root = {**root, "$ref": "#/$defs/ServerCard"}
    return root


def validate(document: dict[str, Any], kind: Kind, *, official: Path | None = None) -> None:
    """CardError naming every place `document` breaks Kiln's schema for `kind` (and, when
    `official` names a published schema file, that file's)."""
    _check(document, card_schema() if kind == "card" else registry_schema(), f"Kiln's {kind}")
    if official is not None:
        _check(document, official_schema(official), f"official {official}")


def _check(document: dict[str, Any], root: dict[str, Any], label: str) -> None:
    import jsonschema  # only `kiln publish` and the tests validate

    validator_class = jsonschema.validators.validator_for(root)
    validator = validator_class(root, format_checker=validator_class.FORMAT_CHECKER)
    problems = sorted(validator.iter_errors(document), key=lambda error: list(error.path))
    if problems:
        raise CardError(
            "; ".join(
                f"{'.'.join(str(p) for p in error.path) or '(document)'}: {error.message}"
                for error in problems
            )
            + f" (schema: {label})"
        )
