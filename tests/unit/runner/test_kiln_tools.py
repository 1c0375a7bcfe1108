"""kiln_tools' pure parts: the key of a call and the value a result gives."""

from __future__ import annotations

from typing import Any

import pytest

from kiln.runner.kiln_tools import ToolCallError, call_key, value_of


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


@pytest.mark.parametrize(
    ("result", "value"),
    [
        ({"content": [text("ignored")], "structuredContent": {"rate": 1.5}}, {"rate": 1.5}),
        ({"content": [text("187.5")]}, 187.5),
        ({"content": [text('{"a": [1, true, null]}')]}, {"a": [1, True, None]}),
        ({"content": [text("Paid 3 from checking")]}, "Paid 3 from checking"),
        ({"content": [text("NaN")]}, "NaN"),
        ({"content": [text("a"), text("b")]}, [text("a"), text("b")]),
        ({"content": [{"type": "image", "data": "eA==", "mimeType": "image/png"}]},
         [{"type": "image", "data": "eA==", "mimeType": "image/png"}]),
        ({"content": []}, []),
    ],
)  # fmt: skip
def test_a_result_gives_its_structured_content_else_its_text_else_its_blocks(
    result: dict[str, Any], value: Any
) -> None:
    assert value_of(result) == value


def test_a_key_numbers_the_call_and_hashes_its_name_and_canonical_arguments() -> None:
    assert call_key(1, "fx_rate", {"to": "JPY", "from": "GBP"}) == "call:1:57904c1894d9"
    assert call_key(1, "fx_rate", {"from": "GBP", "to": "JPY"}) == "call:1:57904c1894d9"
    assert call_key(2, "fx_rate", {"from": "GBP", "to": "JPY"}) == "call:2:57904c1894d9"
    assert call_key(1, "fx_rate", {"from": "GBP", "to": "USD"}) != "call:1:57904c1894d9"
    assert len(call_key(10**6, "x" * 63, {"a": "b" * 10_000})) <= 64


def test_arguments_that_are_not_json_are_refused_before_anything_is_asked() -> None:
    with pytest.raises(TypeError, match="a tool's arguments must be JSON data"):
        call_key(1, "fx_rate", {"when": object()})
    with pytest.raises(TypeError, match="must be JSON data"):
        call_key(1, "fx_rate", {"amount": float("nan")})


def test_a_tool_call_error_carries_the_whole_result_and_says_its_text() -> None:
    result = {"content": [text("line one"), text("line two")], "isError": True}
    error = ToolCallError("fx_rate", result)
    assert (str(error), error.result, error.name) == ("line one\nline two", result, "fx_rate")
    assert str(ToolCallError("x", {"isError": True})) == "the tool 'x' failed without a message"
