"""The opt-in `kiln/content` stdout shape: validated MCP content blocks, per version."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kiln.protocol import McpEndpoint, ProtocolSettings, ToolView
from support.protocol import Client, FakeBackend, body, printing

PNG = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5E"
    "rkJggg=="
)
WAV = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA="
ALL_BLOCKS = [
    {"type": "text", "text": "hello"},
    {"type": "image", "data": PNG, "mimeType": "image/png"},
    {"type": "audio", "data": WAV, "mimeType": "audio/wav"},
    {
        "type": "resource",
        "resource": {"uri": "test://r", "mimeType": "text/plain", "text": "inside"},
    },
    {"type": "resource_link", "uri": "https://example.com/r", "name": "r"},
]


def call(
    printed: Any,
    *,
    version: str | None = "2025-11-25",
    modern: bool = False,
    output_schema: dict[str, Any] | None = None,
    text: str | None = None,
) -> dict[str, Any]:
    stdout = printed if isinstance(printed, str) else json.dumps(printed)
    backend = FakeBackend()
    backend.add(
        ToolView(
            name="blocks",
            description="d",
            input_schema={"type": "object"},
            output_schema=output_schema,
        ),
        printing(stdout, text=text),
    )
    client = Client(McpEndpoint(backend, ProtocolSettings()))
    params = {"name": "blocks", "arguments": {}}
    response = (
        client.modern("tools/call", params)
        if modern
        else client.legacy("tools/call", params, version=version)
    )
    return body(response)["result"]


def test_every_block_type_passes_through_to_a_version_that_knows_it() -> None:
    result = call({"kiln/content": ALL_BLOCKS})
    assert result["isError"] is False
    assert result["content"] == ALL_BLOCKS


def test_modern_era_gets_the_same_blocks() -> None:
    assert call({"kiln/content": ALL_BLOCKS}, modern=True)["content"] == ALL_BLOCKS


def test_blocks_unknown_to_the_version_are_dropped_with_a_note() -> None:
    result = call({"kiln/content": ALL_BLOCKS}, version="2024-11-05")
    types = [b["type"] for b in result["content"]]
    assert types == ["text", "image", "resource", "text", "text"]
    notes = " ".join(b["text"] for b in result["content"][-2:])
    assert "audio block left out" in notes
    assert "resource_link block left out" in notes


def test_resource_link_is_dropped_for_2025_03_26_but_audio_is_kept() -> None:
    types = [b["type"] for b in call({"kiln/content": ALL_BLOCKS}, version=None)["content"]]
    assert types == ["text", "image", "audio", "resource", "text"]


def test_is_error_flag_marks_the_result() -> None:
    shape = {"kiln/content": [{"type": "text", "text": "nope"}], "isError": True}
    result = call(shape)
    assert result["isError"] is True
    assert result["content"] == [{"type": "text", "text": "nope"}]


def test_structured_content_passes_for_versions_that_know_it() -> None:
    shape = {"kiln/content": [{"type": "text", "text": "{}"}], "structuredContent": {"a": 1}}
    assert call(shape)["structuredContent"] == {"a": 1}
    assert "structuredContent" not in call(shape, version="2025-03-26")


def test_structured_content_is_checked_against_the_output_schema() -> None:
    schema = {"type": "object", "required": ["a"], "properties": {"a": {"type": "integer"}}}
    good = {"kiln/content": [{"type": "text", "text": "x"}], "structuredContent": {"a": 1}}
    bad = {"kiln/content": [{"type": "text", "text": "x"}], "structuredContent": {"a": "1"}}
    missing = {"kiln/content": [{"type": "text", "text": "x"}]}
    assert call(good, output_schema=schema)["structuredContent"] == {"a": 1}
    bad_result = call(bad, output_schema=schema)
    assert bad_result["isError"] is True
    assert "a: must be of type integer" in bad_result["content"][0]["text"]
    missing_result = call(missing, output_schema=schema)
    assert missing_result["isError"] is True
    assert "no structuredContent" in missing_result["content"][0]["text"]


@pytest.mark.parametrize(
    ("shape", "expected"),
    [
        ({"kiln/content": "text"}, "kiln/content: must be a list of content blocks"),
        ({"kiln/content": [{"type": "video"}]}, "kiln/content[0].type: must be one of"),
        ({"kiln/content": [{"type": "image", "data": PNG}]}, "kiln/content[0].mimeType"),
        ({"kiln/content": [{"type": "text"}]}, "kiln/content[0].text: Field required"),
        ({"kiln/content": [{"type": "image", "data": "@@", "mimeType": "image/png"}]}, "base64"),
        ({"kiln/content": [7]}, "kiln/content[0]: must be an object"),
        ({"kiln/content": [], "isError": "yes"}, "isError: must be true or false"),
        ({"kiln/content": [], "extra": 1}, "extra: is not allowed here"),
        (
            {"kiln/content": [{"type": "resource", "resource": {"uri": "x", "blob": "%%"}}]},
            "kiln/content[0].resource.blob: must be base64",
        ),
    ],
)
def test_invalid_shape_is_an_error_saying_what_is_wrong(
    shape: dict[str, Any], expected: str
) -> None:
    result = call(shape)
    assert result["isError"] is True
    text = result["content"][0]["text"]
    assert "'kiln/content' object that is not valid" in text
    assert expected in text


def test_every_problem_in_a_shape_is_listed() -> None:
    shape = {"kiln/content": [{"type": "text"}, {"type": "video"}], "isError": 1}
    text = call(shape)["content"][0]["text"]
    assert text.count("\n- ") == 3


def test_stderr_notes_after_the_shape_are_kept() -> None:
    stdout = json.dumps({"kiln/content": [{"type": "text", "text": "hi"}]})
    result = call(stdout, text=stdout + "\n[stderr] DeprecationWarning: old")
    assert result["content"][-1] == {"type": "text", "text": "[stderr] DeprecationWarning: old"}


def test_plain_json_without_the_marker_is_ordinary_text() -> None:
    result = call({"content": [{"type": "text", "text": "hi"}]})
    assert result["content"] == [
        {"type": "text", "text": '{"content": [{"type": "text", "text": "hi"}]}'}
    ]
