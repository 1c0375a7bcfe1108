"""Code mode's stubs (kiln/protocol/codestubs.py): typed functions made from real schemas."""

from __future__ import annotations

import importlib.util
import inspect
import json
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from kiln.protocol.backend import ToolView
from kiln.protocol.codestubs import function_names, python_stub_summary, python_stubs
from kiln.runner.kiln_tools import call_key

HELPER = Path(importlib.util.find_spec("kiln.runner.kiln_tools").origin)  # type: ignore[arg-type, union-attr]

FX = ToolView(
    "fx-rate",
    "Convert an amount between currencies.\nRates are the ECB's of the day.",
    {
        "type": "object",
        "properties": {
            "from": {"type": "string", "enum": ["GBP", "USD", "EUR"], "description": "From."},
            "to": {"type": "string", "description": "ISO 4217 code to convert to."},
            "amount": {"type": "number", "default": 1, "description": "How much."},
        },
        "required": ["from", "to"],
        "additionalProperties": False,
    },
    output_schema={"type": "object", "properties": {"rate": {"type": "number"}}},
)
ISSUES = ToolView(
    "list_issues",
    "List a repository's issues.",
    {
        "type": "object",
        "properties": {
            "repo": {
                "type": "object",
                "description": "Which repository.",
                "properties": {
                    "owner": {"type": "string", "description": "Its owner's login."},
                    "name": {"type": "string"},
                },
                "required": ["owner", "name"],
            },
            "labels": {"type": "array", "items": {"type": "string"}, "description": "Any of."},
            "state": {"const": "open"},
            "since": {"type": ["string", "null"], "format": "date-time"},
            "limit": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
            "2fa-code": {"type": "integer"},
            "matrix": {"type": "array", "items": {"type": "array", "items": {"type": "number"}}},
            "extra": {},
        },
        "required": ["repo"],
    },
)
KEYWORD = ToolView("import", "Import a file.", {"type": "object", "properties": {}})
BUILTIN = ToolView("print", "Print a page.", {"type": "object"})
SAME = ToolView("fx_rate", "The other fx rate.", {"type": "object"})


def load(source: str, monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    """The stubs as a module, over a fresh copy of the real kiln_tools (its call count at 0)."""
    spec = importlib.util.spec_from_file_location("kiln_tools", HELPER)
    assert spec is not None
    assert spec.loader is not None
    helper = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(helper)
    monkeypatch.setitem(sys.modules, "kiln_tools", helper)
    module = types.ModuleType("kiln_view")
    exec(compile(source, "kiln_view.py", "exec", dont_inherit=True), module.__dict__)  # noqa: S102 - the stubs under test
    return module


def test_the_stubs_compile_and_each_signature_is_typed_from_the_schema(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    view = load(python_stubs([FX, ISSUES, KEYWORD, BUILTIN, SAME]), monkeypatch)
    assert view.__all__ == ["fx_rate_", "list_issues", "import_", "print_", "fx_rate"]
    assert str(inspect.signature(view.fx_rate_)) == (
        "(*, from_: Literal['GBP', 'USD', 'EUR'], to: str, amount: float | None = None)"
        " -> dict[str, typing.Any]"
    )
    assert str(inspect.signature(view.list_issues)) == (
        "(*, repo: dict[str, typing.Any], labels: list[str] | None = None, "
        "state: Optional[Literal['open']] = None, since: str | None = None, "
        "limit: int | None = None, _2fa_code: int | None = None, "
        "matrix: list[list[float]] | None = None, extra: Any = None) -> Any"
    )
    assert str(inspect.signature(view.import_)) == "(**kwargs: Any) -> Any"  # takes anything


def test_docstrings_carry_the_description_and_each_argument_s_description(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    view = load(python_stubs([FX, ISSUES]), monkeypatch)
    assert inspect.getdoc(view.fx_rate) == (
        "Convert an amount between currencies.\nRates are the ECB's of the day.\n\nArgs:\n"
        "    from_ (Literal['GBP', 'USD', 'EUR']) ['from' in the tool's arguments]: From.\n"
        "    to (str): ISO 4217 code to convert to.\n"
        "    amount (float, optional): How much. (default 1)\n\n"
        "Returns: dict[str, Any]\n    'rate' (float)"
    )
    doc = inspect.getdoc(view.list_issues) or ""
    assert "    repo (dict[str, Any]): Which repository.\n" in doc
    assert "        'owner' (str): Its owner's login.\n        'name' (str)\n" in doc
    assert "_2fa_code (int, optional) ['2fa-code' in the tool's arguments]" in doc


def test_a_stub_sends_its_tool_s_name_and_only_the_arguments_given(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    key = call_key(1, "fx-rate", {"from": "GBP", "to": "JPY"})
    answer = {"content": [{"type": "text", "text": "-"}], "structuredContent": {"rate": 187.5}}
    monkeypatch.setenv("KILN_ANSWERS", json.dumps({key: answer}))
    monkeypatch.setenv("KILN_CALLS", '["fx-rate"]')
    view = load(python_stubs([FX]), monkeypatch)
    assert view.fx_rate(from_="GBP", to="JPY") == {"rate": 187.5}
    with pytest.raises(TypeError, match="missing 1 required keyword-only argument: 'to'"):
        view.fx_rate(from_="GBP")


def test_arguments_a_schema_does_not_name_go_through_kwargs_only_where_it_takes_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    obj = {"type": "object"}
    named = {**obj, "properties": {"to": {"type": "string"}}}
    tools = [
        ToolView("anything", "", obj),
        ToolView("closed", "", {**obj, "additionalProperties": False}),
        ToolView("named", "", named),
        ToolView("named_and_more", "", {**named, "additionalProperties": {"type": "integer"}}),
    ]
    key = call_key(1, "anything", {"from": "GBP", "to": "JPY"})
    monkeypatch.setenv(
        "KILN_ANSWERS", json.dumps({key: {"content": [{"type": "text", "text": "1"}]}})
    )
    view = load(python_stubs(tools), monkeypatch)
    assert view.anything(from_="GBP", to="JPY") == 1  # from_ sends "from", as tools.x does
    assert str(inspect.signature(view.closed)) == "() -> Any"
    assert str(inspect.signature(view.named)) == "(*, to: str | None = None) -> Any"
    assert str(inspect.signature(view.named_and_more)) == (
        "(*, to: str | None = None, **kwargs: Any) -> Any"
    )
    with pytest.raises(TypeError, match="unexpected keyword argument 'amount'"):
        view.named(to="JPY", amount=1)


def test_names_are_made_safe_and_a_name_that_needs_no_change_keeps_it() -> None:
    assert function_names([FX, SAME, KEYWORD, BUILTIN]) == {
        "fx_rate": "fx_rate",
        "fx-rate": "fx_rate_",
        "import": "import_",
        "print": "print_",
    }
    tools_tool = ToolView("tools", "", {"type": "object"})
    error_tool = ToolView("ToolCallError", "", {"type": "object"})
    assert set(function_names([tools_tool, error_tool]).values()) == {"tools_", "ToolCallError_"}


HOSTILE_TEXT = [
    'ends with a quote"',
    'triple """ quotes """ inside',
    "back\\slash \\n and \\x00 and \\",
    "new\nlines\r\nand\ttabs",
    "a NUL \x00 and a lone surrogate \ud800",
    '"""\nraise SystemExit("escaped the docstring")\n"""',
    "''' single triples '''",
]


@pytest.mark.parametrize("text", HOSTILE_TEXT)
def test_hostile_descriptions_enums_and_names_still_give_valid_python(
    text: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    schema = {
        "type": "object",
        "properties": {
            text: {"type": "string", "enum": [text, "plain"], "description": text},
            "x": {"description": text, "type": "object", "properties": {text: {}}},
        },
        "required": [text],
    }
    hostile = ToolView("evil-tool", text, schema, output_schema={"description": text})
    source = python_stubs([hostile])
    source.encode("utf-8")  # a file the runner can write
    view = load(source, monkeypatch)
    doc = inspect.getdoc(view.evil_tool) or ""
    assert text.strip().split("\n")[0].strip() in doc
    (first, _), *_ = inspect.signature(view.evil_tool).parameters.items()
    assert first.isidentifier()
    summary = python_stub_summary([hostile])
    assert len(summary.splitlines()) == 1, summary


def test_the_summary_is_one_line_per_tool_its_signature_and_first_line() -> None:
    assert python_stub_summary([FX, KEYWORD]) == (
        "fx_rate(from_: Literal['GBP', 'USD', 'EUR'], to: str, amount: float | None = None)"
        " -> {'rate': float}  # Convert an amount between currencies.\n"
        "import_(**kwargs)  # Import a file."
    )
    many = ToolView(
        "pick",
        "x" * 500,
        {"type": "object", "properties": {"c": {"enum": [f"v{i}" for i in range(40)]}}},
    )
    line = python_stub_summary([many])
    assert "'v7', ...]" in line
    assert "v8" not in line
    assert line.endswith("x…")
    assert len(line) < 250


def test_a_summary_past_its_budget_says_how_many_more_tools_search_finds() -> None:
    closed = {"type": "object", "additionalProperties": False}
    tools = [ToolView(f"tool_{i}", f"Does thing {i}.", closed) for i in range(50)]
    summary = python_stub_summary(tools, max_chars=400)
    assert len(summary) <= 400
    *shown, last = summary.splitlines()
    assert shown[:2] == ["tool_0()  # Does thing 0.", "tool_1()  # Does thing 1."]
    assert last == f"... and {50 - len(shown)} more tools: find them with search_tools"
    assert python_stub_summary(tools[:3], max_chars=400).count("\n") == 2  # all fit


def test_a_hundred_tools_make_a_module_that_compiles(monkeypatch: pytest.MonkeyPatch) -> None:
    tools: list[ToolView] = []
    for i in range(100):
        props: dict[str, Any] = {f"arg{j}": {"type": "string"} for j in range(5)}
        tools.append(ToolView(f"tool-{i}", f"Tool {i}.", {"type": "object", "properties": props}))
    view = load(python_stubs(tools), monkeypatch)
    assert len(view.__all__) == 100
