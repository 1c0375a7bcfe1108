"""Versions and per-version wire shapes, built from the official `mcp-types` models.

`mcp-types` models are version supersets: they carry every field of every revision. This
module dumps them and keeps only what the negotiated revision defines (digest §4.2).

A cold start's first `tools/list` must not pay for importing `mcp-types` (see `spec.py`), so
the two shapes it needs, `Tool` and `Implementation`, are also rendered by hand exactly as the
models dump them; tests/unit/protocol/test_spec.py holds the two renderings equal. Anything the
hand rendering is unsure of (annotations of an unexpected type or key) goes through the model.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kiln.protocol.backend import ToolView
from kiln.protocol.spec import (
    HANDSHAKE_PROTOCOL_VERSIONS,
    KNOWN_PROTOCOL_VERSIONS,
    LATEST_HANDSHAKE_VERSION,
    MODERN_PROTOCOL_VERSIONS,
)

if TYPE_CHECKING:
    from mcp_types import Tool

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
    fields = (
        ("name", name),
        ("title", title),
        ("version", version),
        ("description", description),
        ("websiteUrl", website_url),
    )  # the model's field order
    dumped = {key: value for key, value in fields if value is not None}
    return _keep(dumped, _SERVER_INFO_FIELDS_SINCE, protocol_version)


_HINTS = ("readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint")
_ANNOTATION_KEYS = frozenset(("title", *_HINTS))
_TASK_SUPPORT = frozenset(("forbidden", "optional", "required"))


def _plain_annotations(raw: Mapping[str, Any]) -> dict[str, Any] | None:
    """`ToolAnnotations`' dump of `raw`, or None when only the model can tell (coercions)."""
    if not _ANNOTATION_KEYS.issuperset(raw):
        return None
    dumped: dict[str, Any] = {}
    for key in ("title", *_HINTS):
        value = raw.get(key)
        if value is None:
            continue
        if not isinstance(value, str if key == "title" else bool):
            return None
        dumped[key] = value
    return dumped


def tool_dict(tool: ToolView) -> dict[str, Any] | None:
    """`tool_model(tool)`'s JSON dump without pydantic; None when the model must decide."""
    if tool.task_support is not None and tool.task_support not in _TASK_SUPPORT:
        return None
    annotations = None
    if tool.annotations is not None:
        annotations = _plain_annotations(tool.annotations)
        if annotations is None:
            return None
    dumped: dict[str, Any] = {"name": tool.name}
    if tool.title is not None:
        dumped["title"] = tool.title
    if tool.description is not None:
        dumped["description"] = tool.description
    dumped["inputSchema"] = dict(tool.input_schema)
    if tool.task_support is not None:
        dumped["execution"] = {"taskSupport": tool.task_support}
    if tool.output_schema is not None:
        dumped["outputSchema"] = dict(tool.output_schema)
    if annotations is not None:
        dumped["annotations"] = annotations
    if tool.meta is not None:
        dumped["_meta"] = dict(tool.meta)
    return dumped


def tool_model(tool: ToolView) -> Tool:
    """The version-superset `Tool` for a catalog tool."""
    from mcp_types import Tool, ToolAnnotations, ToolExecution

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
