"""Kiln's own JSON Schemas (Draft 2020-12) for the documents it publishes about itself.

Written here from the rules of two published specifications, not copied from their files:
the Server Card of the MCP server-card extension (SEP-2127, draft `v1`) and the MCP Registry's
`server.json` (2025-12-11). Each schema states the rules a Kiln document must meet: which
fields it needs, their types, the reverse-DNS name, the lengths, what a remote must say. Where
the specifications allow more than Kiln writes (packages, icons, arguments), the shape is
checked loosely. The sources and versions are named in `schemas/README.md`, which also says
how to check against an official file as well (`KILN_CARD_SCHEMA_FILE`,
`KILN_REGISTRY_SCHEMA_FILE`).
"""

from __future__ import annotations

from typing import Any

DIALECT = "https://json-schema.org/draft/2020-12/schema"
CARD_SCHEMA_URL = "https://static.modelcontextprotocol.io/schemas/v1/server-card.schema.json"
REGISTRY_SCHEMA_URL = "https://static.modelcontextprotocol.io/schemas/2025-12-11/server.schema.json"

# Both specifications: a reverse-DNS namespace, one slash, the server's own name.
NAME_REGEX = r"^[a-zA-Z0-9.-]+/[a-zA-Z0-9._-]+$"
NAME_LENGTH = (3, 200)
TEXT_LENGTH = (1, 100)  # description and title
VERSION_MAX = 255
HTTP_URL_REGEX = r"^https?://[^\s]+$"
# A card's remote may also start with a `{variable}` its client fills in.
CARD_URL_REGEX = r"^(https?://[^\s]+|\{[a-zA-Z_][a-zA-Z0-9_]*\}[^\s]*)$"
INPUT_FORMATS = ["string", "number", "boolean", "filepath"]


def _text(length: tuple[int, int]) -> dict[str, Any]:
    return {"type": "string", "minLength": length[0], "maxLength": length[1]}


def _input() -> dict[str, Any]:
    """A value a client supplies (a header's, a URL variable's)."""
    return {
        "type": "object",
        "properties": {
            "description": {"type": "string"},
            "value": {"type": "string"},
            "default": {"type": "string"},
            "placeholder": {"type": "string"},
            "isRequired": {"type": "boolean"},
            "isSecret": {"type": "boolean"},
            "format": {"enum": INPUT_FORMATS},
            "choices": {"type": "array", "items": {"type": "string"}},
        },
    }


def _header() -> dict[str, Any]:
    """A header a remote asks for: a named input, which may fill `{variables}` in its value."""
    header = _input()
    header["required"] = ["name"]
    header["properties"] = {
        **header["properties"],
        "name": {"type": "string", "minLength": 1},
        "variables": {"type": "object", "additionalProperties": {"$ref": "#/$defs/input"}},
    }
    return header


def _remote(types: list[str], url_regex: str, extra: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["type", "url"],
        "properties": {
            "type": {"enum": types},
            "url": {"type": "string", "pattern": url_regex},
            "headers": {"type": "array", "items": {"$ref": "#/$defs/header"}},
            "variables": {"type": "object", "additionalProperties": {"$ref": "#/$defs/input"}},
            **extra,
        },
    }


def _common(schema_url: dict[str, Any], remote: dict[str, Any]) -> dict[str, Any]:
    """What a card and a registry entry share: identity, text, links and remotes."""
    return {
        "$schema": DIALECT,
        "type": "object",
        "required": ["name", "description", "version"],
        "properties": {
            "$schema": schema_url,
            "name": {**_text(NAME_LENGTH), "pattern": NAME_REGEX},
            "title": _text(TEXT_LENGTH),
            "description": _text(TEXT_LENGTH),
            "version": {"type": "string", "minLength": 1, "maxLength": VERSION_MAX},
            "websiteUrl": {"type": "string", "format": "uri"},
            "repository": {
                "type": "object",
                "required": ["url", "source"],
                "properties": {
                    "url": {"type": "string", "format": "uri"},
                    "source": {"type": "string"},
                    "id": {"type": "string"},
                    "subfolder": {"type": "string"},
                },
            },
            "icons": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["src"],
                    "properties": {
                        "src": {"type": "string", "format": "uri"},
                        "theme": {"enum": ["light", "dark"]},
                    },
                },
            },
            "remotes": {"type": "array", "items": {"$ref": "#/$defs/remote"}},
            "_meta": {"type": "object"},
        },
        "$defs": {"input": _input(), "header": _header(), "remote": remote},
    }


def card_schema() -> dict[str, Any]:
    """A Server Card: `$schema` must name the extension's v1 card schema."""
    versions = {"type": "array", "items": {"type": "string", "minLength": 1}}
    schema = _common(
        {"type": "string", "const": CARD_SCHEMA_URL},
        _remote(
            ["streamable-http", "sse"], CARD_URL_REGEX, {"supportedProtocolVersions": versions}
        ),
    )
    schema["$id"] = "urn:kiln:schema:server-card:v1"
    schema["required"] = ["$schema", *schema["required"]]
    return schema


def registry_schema() -> dict[str, Any]:
    """A registry `server.json` (2025-12-11): remotes are plain http(s) URLs, and a package
    names its registry, its identifier and how it is run."""
    schema = _common(
        {"type": "string", "format": "uri"},
        _remote(["streamable-http", "sse"], HTTP_URL_REGEX, {}),
    )
    schema["$id"] = "urn:kiln:schema:registry-server:2025-12-11"
    schema["properties"]["packages"] = {
        "type": "array",
        "items": {
            "type": "object",
            "required": ["registryType", "identifier", "transport"],
            "properties": {
                "registryType": {"type": "string"},
                "identifier": {"type": "string"},
                "version": {"type": "string", "minLength": 1},
                "fileSha256": {"type": "string", "pattern": "^[a-f0-9]{64}$"},
                "transport": {
                    "type": "object",
                    "required": ["type"],
                    "properties": {"type": {"enum": ["stdio", "streamable-http", "sse"]}},
                },
            },
        },
    }
    return schema
