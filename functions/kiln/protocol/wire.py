"""Versions and per-version wire shapes, built from the official `mcp-types` models.

`mcp-types` models are version supersets: they carry every field of every revision. This
module dumps them and keeps only what the negotiated revision defines (digest §4.2).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mcp_types import Implementation, Tool, ToolAnnotations, ToolExecution
from mcp_types.version import (
    HANDSHAKE_PROTOCOL_VERSIONS,
    KNOWN_PROTOCOL_VERSIONS,
    LATEST_HANDSHAKE_VERSION,
    MODERN_PROTOCOL_VERSIONS,
)

from kiln.protocol.backend import ToolView

LEGACY_VERSIONS: tuple[str, ...] = HANDSHAKE_PROTOCOL_VERSIONS
MODERN_VERSIONS: tuple[str, ...] = MODERN_PROTOCOL_VERSIONS
LATEST_LEGACY = LATEST_HANDSHAKE_VERSION
DEFAULT_LEGACY = "2025-03-26"  # what a request without MCP-Protocol-Version is assumed to speak
BATCH_VERSION = "2025-03-26"  # the only revision with JSON-RPC batches
MAX_BATCH = 20


def at_least(version: str, minimum: str) -> bool:
    order = KNOWN_PROTOCOL_VERSIONS
    return order.index(version) >= order.index(minimum)


_TOOL_FIELDS_SINCE = {
    "name": "2024-11-05",
    "description": "2024-11-05",
    "inputSchema": "2024-11-05",
    "annotations": "2025-03-26",
    "title": "2025-06-18",
    "outputSchema": "2025-06-18",
    "_meta": "2025-06-18",
    "icons": "2025-11-25",
    "execution": "2025-11-25",  # experimental tasks; 2026-07-28 moved them to an extension
}

_SERVER_INFO_FIELDS_SINCE = {
    "name": "2024-11-05",
    "version": "2024-11-05",
    "title": "2025-06-18",
    "description": "2025-11-25",
    "websiteUrl": "2025-11-25",
    "icons": "2025-11-25",
}

# Content block types and when each appeared (digest §4.3).
CONTENT_TYPES_SINCE = {
    "text": "2024-11-05",
    "image": "2024-11-05",
    "resource": "2024-11-05",
    "audio": "2025-03-26",
    "resource_link": "2025-06-18",
}


def _keep(fields: Mapping[str, Any], since: Mapping[str, str], version: str) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if k in since and at_least(version, since[k])}


def server_info(
    *,
    name: str,
    version: str,
    title: str | None,
    description: str | None,
    website_url: str | None,
    protocol_version: str,
) -> dict[str, Any]:
    """`serverInfo` (an `Implementation`) as `protocol_version` defines it."""
    model = Implementation(
        name=name, version=version, title=title, description=description, website_url=website_url
    )
    dumped = model.model_dump(by_alias=True, exclude_none=True, mode="json")
    return _keep(dumped, _SERVER_INFO_FIELDS_SINCE, protocol_version)


def tool_model(tool: ToolView) -> Tool:
    """The version-superset `Tool` for a catalog tool."""
    return Tool(
        name=tool.name,
        title=tool.title,
        description=tool.description,
        input_schema=dict(tool.input_schema),
        output_schema=dict(tool.output_schema) if tool.output_schema is not None else None,
        annotations=(
            ToolAnnotations.model_validate(dict(tool.annotations))
            if tool.annotations is not None
            else None
        ),
        _meta=dict(tool.meta) if tool.meta is not None else None,
        execution=(
            ToolExecution(task_support=tool.task_support) if tool.task_support is not None else None
        ),
    )


def tool_for_version(dumped: Mapping[str, Any], version: str) -> dict[str, Any]:
    """A dumped `Tool` reduced to the fields `version` knows.

    Through 2025-11-25 an `outputSchema` must have an object root; a tool whose schema does
    not is listed to those clients without it (its results then carry no structuredContent).
    """
    kept = _keep(dumped, _TOOL_FIELDS_SINCE, version)
    if version in MODERN_VERSIONS:
        kept.pop("execution", None)
    schema = kept.get("outputSchema")
    if schema is not None and version in LEGACY_VERSIONS and schema.get("type") != "object":
        del kept["outputSchema"]
    return kept


def structured_allowed(version: str, tool: ToolView) -> bool:
    """Whether results for `tool` carry `structuredContent` under `version`."""
    if tool.output_schema is None or not at_least(version, "2025-06-18"):
        return False
    return version in MODERN_VERSIONS or tool.output_schema.get("type") == "object"
