"""MCP content blocks from a tool's stdout: the opt-in `kiln/content` shape.

A tool that wants to return more than one text block (images, audio, embedded resources,
resource links) prints exactly one JSON object with a `kiln/content` key:

    {"kiln/content": [
        {"type": "text", "text": "Here is the chart"},
        {"type": "image", "data": "<base64>", "mimeType": "image/png"},
        {"type": "audio", "data": "<base64>", "mimeType": "audio/wav"},
        {"type": "resource", "resource": {"uri": "file:///r.txt", "mimeType": "text/plain",
                                          "text": "..."}},
        {"type": "resource_link", "uri": "https://example.com/r", "name": "r"}
     ],
     "isError": false,
     "structuredContent": {"any": "json"}}

- `kiln/content` (required): a list of MCP content blocks, written exactly as MCP defines them
  (camelCase keys; `data` and `blob` are base64). Each is validated with the official
  `mcp-types` models before it is sent.
- `isError` (optional, default false): mark the result as a tool error.
- `structuredContent` (optional): the structured result. When the tool declares an
  `output_schema` it is required and must validate against it.
- No other keys. A shape that breaks these rules turns into an `isError` result that says
  exactly what is wrong (`kiln/content[1].mimeType: Field required`).
- Block types the client's protocol revision does not know (audio before 2025-03-26,
  resource_link before 2025-06-18) are left out, and a text block says so.

Stdout that is not such an object is the ordinary script contract: one text block.
"""

from __future__ import annotations

import base64
import binascii
import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kiln.protocol.wire import CONTENT_TYPES_SINCE, at_least

if TYPE_CHECKING:
    from pydantic import BaseModel, ValidationError

MARKER = "kiln/content"
_ALLOWED_KEYS = frozenset({MARKER, "isError", "structuredContent"})
_BLOCK_TYPES = ("text", "image", "audio", "resource", "resource_link")


@functools.cache
def _block_models() -> dict[str, type[BaseModel]]:
    # On first use: importing mcp-types is most of a cold start (see spec.py).
    from mcp_types import AudioContent, EmbeddedResource, ImageContent, ResourceLink, TextContent

    models: tuple[type[BaseModel], ...] = (
        TextContent,
        ImageContent,
        AudioContent,
        EmbeddedResource,
        ResourceLink,
    )
    return dict(zip(_BLOCK_TYPES, models, strict=True))


class ContentShapeError(ValueError):
    """The stdout claims the `kiln/content` shape but breaks its rules."""


@dataclass(frozen=True)
class ContentReply:
    blocks: list[dict[str, Any]]
    is_error: bool
    structured: Any
    has_structured: bool


def claims_shape(parsed: Any) -> bool:
    return isinstance(parsed, dict) and MARKER in parsed


def _pydantic_problems(where: str, exc: ValidationError) -> list[str]:
    problems = []
    for err in exc.errors(include_url=False, include_input=False, include_context=False):
        loc = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err["loc"])
        problems.append(f"{where}{loc}: {err['msg']}")
    return problems


def _check_base64(where: str, value: Any) -> list[str]:
    if not isinstance(value, str):
        return []
    try:
        base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return [f"{where}: must be base64"]
    return []


def _block(index: int, raw: Any) -> tuple[dict[str, Any] | None, list[str]]:
    where = f"{MARKER}[{index}]"
    if not isinstance(raw, dict):
        return None, [f"{where}: must be an object"]
    from pydantic import ValidationError

    kind = raw.get("type")
    model = _block_models().get(kind) if isinstance(kind, str) else None
    if model is None:
        return None, [f"{where}.type: must be one of " + ", ".join(_BLOCK_TYPES)]
    try:
        block = model.model_validate(raw)
    except ValidationError as exc:
        return None, _pydantic_problems(where, exc)
    problems = _check_base64(f"{where}.data", raw.get("data"))
    resource = raw.get("resource")
    if isinstance(resource, dict):
        problems += _check_base64(f"{where}.resource.blob", resource.get("blob"))
    if problems:
        return None, problems
    return block.model_dump(by_alias=True, exclude_none=True, mode="json"), []


def parse_shape(parsed: dict[str, Any]) -> ContentReply:
    """Validate a `kiln/content` object; raises ContentShapeError listing every problem."""
    problems = [f"{key}: is not allowed here" for key in sorted(set(parsed) - _ALLOWED_KEYS)]
    raw_blocks = parsed[MARKER]
    blocks: list[dict[str, Any]] = []
    if not isinstance(raw_blocks, list):
        problems.append(f"{MARKER}: must be a list of content blocks")
    else:
        for index, raw in enumerate(raw_blocks):
            block, block_problems = _block(index, raw)
            problems += block_problems
            if block is not None:
                blocks.append(block)
    is_error = parsed.get("isError", False)
    if not isinstance(is_error, bool):
        problems.append("isError: must be true or false")
    if problems:
        raise ContentShapeError("\n".join(f"- {p}" for p in problems))
    return ContentReply(
        blocks=blocks,
        is_error=is_error,
        structured=parsed.get("structuredContent"),
        has_structured="structuredContent" in parsed,
    )


def for_version(blocks: list[dict[str, Any]], version: str) -> list[dict[str, Any]]:
    """Blocks the revision knows, plus a text note naming any that had to be left out."""
    kept: list[dict[str, Any]] = []
    dropped: dict[str, int] = {}
    for block in blocks:
        kind = block["type"]
        if at_least(version, CONTENT_TYPES_SINCE[kind]):
            kept.append(block)
        else:
            dropped[kind] = dropped.get(kind, 0) + 1
    for kind, count in dropped.items():
        noun = "block" if count == 1 else "blocks"
        note = (
            f"[kiln] {count} {kind} {noun} left out: MCP {version} has no {kind} content "
            f"(it arrived in {CONTENT_TYPES_SINCE[kind]})"
        )
        from mcp_types import TextContent

        kept.append(TextContent(text=note).model_dump(by_alias=True, exclude_none=True))
    return kept
