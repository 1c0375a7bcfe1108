"""The protocol's copies of `mcp-types` (constants, hand-rendered shapes) agree with it.

`kiln.protocol.spec` and `wire.tool_dict` / `wire.server_info` exist so that a cold start's
first tools/list never imports `mcp-types`; these tests hold them to the installed package.
"""

from __future__ import annotations

import json
from typing import Any

import mcp_types
import mcp_types.version
import pytest
from mcp_types import Implementation, ListToolsResult

from kiln.protocol import spec
from kiln.protocol.backend import ToolView
from kiln.protocol.cursor import CursorCodec
from kiln.protocol.listing import ToolLister
from kiln.protocol.wire import KNOWN_PROTOCOL_VERSIONS, server_info, tool_dict, tool_model

CONSTANTS = [
    "PARSE_ERROR",
    "INVALID_REQUEST",
    "METHOD_NOT_FOUND",
    "INVALID_PARAMS",
    "INTERNAL_ERROR",
    "HEADER_MISMATCH",
    "MISSING_REQUIRED_CLIENT_CAPABILITY",
    "UNSUPPORTED_PROTOCOL_VERSION",
    "URL_ELICITATION_REQUIRED",
    "PROTOCOL_VERSION_META_KEY",
    "CLIENT_CAPABILITIES_META_KEY",
    "SERVER_INFO_META_KEY",
]
VERSIONS = [
    "HANDSHAKE_PROTOCOL_VERSIONS",
    "MODERN_PROTOCOL_VERSIONS",
    "KNOWN_PROTOCOL_VERSIONS",
    "LATEST_HANDSHAKE_VERSION",
]


@pytest.mark.parametrize("name", CONSTANTS)
def test_each_copied_constant_equals_the_one_mcp_types_defines(name: str) -> None:
    assert getattr(spec, name) == getattr(mcp_types, name)


@pytest.mark.parametrize("name", VERSIONS)
def test_each_copied_revision_list_equals_the_one_mcp_types_defines(name: str) -> None:
    assert getattr(spec, name) == getattr(mcp_types.version, name)


SCHEMA = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
PLAIN = [
    ToolView(name="a", description="A.", input_schema=SCHEMA),
    ToolView(name="b", description="", input_schema={"type": "object"}, title="Bee"),
    ToolView(
        name="c",
        description="C.",
        input_schema=SCHEMA,
        output_schema={"type": "object", "properties": {"n": {"type": "number"}}},
        annotations={
            "openWorldHint": False,
            "idempotentHint": False,
            "destructiveHint": True,
            "readOnlyHint": True,
            "title": "See",
        },
        meta={"example.com/x": [1, {"y": None}]},
        task_support="optional",
    ),
    ToolView(name="d", description="D.", input_schema=SCHEMA, annotations={}),
    ToolView(
        name="e",
        description="E.",
        input_schema=SCHEMA,
        annotations={"destructiveHint": None, "idempotentHint": True},
        output_schema={"type": "array"},
        task_support="required",
    ),
]
# What only the model can judge: coercions, keys by their Python names, unknown keys.
ODD = [
    ToolView(name="f", description="F.", input_schema=SCHEMA, annotations={"readOnlyHint": 1}),
    ToolView(name="g", description="G.", input_schema=SCHEMA, annotations={"read_only_hint": True}),
    ToolView(name="h", description="H.", input_schema=SCHEMA, annotations={"other": "x"}),
    ToolView(name="i", description="I.", input_schema=SCHEMA, annotations={"title": 5}),
]


def _model_dump(tool: ToolView) -> dict[str, Any]:
    return tool_model(tool).model_dump(by_alias=True, exclude_none=True, mode="json")


@pytest.mark.parametrize("tool", PLAIN, ids=lambda t: t.name)
def test_a_plain_tool_renders_by_hand_exactly_as_the_tool_model_dumps_it(tool: ToolView) -> None:
    # Equal down to the order of keys: the cached pages are these bytes.
    assert json.dumps(tool_dict(tool)) == json.dumps(_model_dump(tool))


@pytest.mark.parametrize("tool", ODD, ids=lambda t: t.name)
def test_annotations_only_the_model_can_judge_are_left_to_the_model(tool: ToolView) -> None:
    assert tool_dict(tool) is None


@pytest.mark.parametrize(
    "fields",
    [
        {"name": "kiln", "version": "1.0"},
        {"name": "kiln", "version": "1.0", "title": "Kiln", "description": "d"},
        {"name": "kiln", "version": "1.0", "website_url": "https://example.com"},
    ],
)
@pytest.mark.parametrize("version", ["2025-11-25", "2026-07-28"])  # revisions with every field
def test_server_info_renders_as_the_implementation_model_dumps_it(
    fields: dict[str, str], version: str
) -> None:
    args: dict[str, Any] = {"title": None, "description": None, "website_url": None, **fields}
    rendered = server_info(**args, protocol_version=version)
    dumped = Implementation(**args).model_dump(by_alias=True, exclude_none=True, mode="json")
    assert rendered == dumped
    assert list(rendered) == list(dumped)


@pytest.mark.parametrize("version", KNOWN_PROTOCOL_VERSIONS)
@pytest.mark.parametrize("offset_params", [{}, {"cursor": None}])
def test_a_listed_page_is_what_the_list_tools_result_model_dumps(
    version: str, offset_params: dict[str, Any]
) -> None:
    lister = ToolLister(CursorCodec(b"k" * 32), page_size=2, ttl_ms=5000, tasks=True)
    page: dict[str, Any] = {}

    def finish(result: dict[str, Any]) -> dict[str, Any]:
        page.update(result)
        return result

    lister.page(PLAIN, offset_params, version=version, private=False, finish=finish, request_id=1)
    # Legacy pages carry no ttlMs/cacheScope, which the (superset) model requires.
    full = {"ttlMs": 5000, "cacheScope": "public", **page}
    expected = ListToolsResult.model_validate(full).model_dump(
        by_alias=True, exclude_none=True, mode="json"
    )
    if version not in spec.MODERN_PROTOCOL_VERSIONS:
        expected.pop("ttlMs")
        expected.pop("cacheScope")
    expected["tools"] = page["tools"]  # the tools are cut per revision on purpose
    assert list(page) == list(expected)
    assert page == expected
    assert len(page["tools"]) == 2
    assert "nextCursor" in page
