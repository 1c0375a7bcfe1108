"""Code mode's stubs: a view's tools as typed Python functions for the code `execute` runs.

`python_stubs(tools)` is the source of a module (`kiln_view.py`, beside the wrapper) with one
function per tool. Each takes keyword-only arguments typed from the tool's input schema
(`str`, `int`, `float`, `bool`, `list[...]`, `dict[str, Any]`, `Literal[...]` for an enum or a
const, unions for a list of types or `anyOf`/`oneOf`, `Any` for the rest), a required one
without a default and an optional one as `X | None = None`, left out of the call while it is
None. A schema that takes more than it names (`additionalProperties` true or a schema, or no
`properties` at all and no `additionalProperties: false`) adds `**kwargs`, sent as given (one
trailing `_` dropped, as `tools.x(from_=...)` does); otherwise an argument the schema does not
name is a TypeError before anything is asked (`tools.call` reaches anything). Its docstring is
the tool's description and each argument's description, the same text
`describe_tools` gives (`protocol/discovery.py`). It calls `kiln_tools.tools.call(name,
arguments)` (runner/TALKING.md, "Calling tools"): back through the gate, as the same caller.

Names are made safe, the same way everywhere (`function_names`, `_argument_names`):
- a tool's name: `-` (and anything else no identifier holds) becomes `_`; a name that is a
  Python keyword, a builtin (`print`, `format`, `open`, ...) or one of the names the code
  gets besides (`tools`, `ToolCallError`) gets a trailing `_`, so the code's own `print`
  stays Python's; a name taken already (`fx-rate` beside `fx_rate`) gets another `_` (a
  tool whose name needed no change keeps it);
- an argument's name likewise (ASCII letters, digits and `_` only; a leading digit gets a
  leading `_`; a keyword gets a trailing `_`: `from` -> `from_`), the JSON name in the call.
Text from a tool (descriptions, enum values, names) only ever appears in the source as a
string literal made by `repr` (or a triple-quoted docstring when the text cannot end it),
never as code or a comment: a hostile description gives a docstring, not a statement.

`python_stub_summary(tools)` is what the model reads in `execute`'s description: one line per
tool, its signature and the first line of its description. `execute_program(tools)` is the
one-off tool's script and files: `EXECUTE_WRAPPER` reads `{"code": ...}` from stdin as every
tool reads its arguments, `exec`s it with the view's functions, `tools` and `ToolCallError`
in its globals; the answer is what the code prints; an exception prints a short traceback
(the code's own lines only) on stderr and exits 1.
"""

from __future__ import annotations

import builtins
import keyword
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kiln.protocol.backend import ToolView

STUBS_FILE = "kiln_view.py"
RESERVED_GLOBALS = frozenset({"tools", "ToolCallError"})
_TAKEN = frozenset(dir(builtins)) | RESERVED_GLOBALS
_NOT_IDENTIFIER = re.compile(r"[^A-Za-z0-9_]")
_MORE = "kwargs"  # the name of the arguments a schema takes without naming them
_SIMPLE = {"string": "str", "integer": "int", "number": "float", "boolean": "bool"}
_MAX_DEPTH = 4  # nesting rendered as types; deeper is Any
_SUMMARY_LITERALS = 8  # enum values a summary line shows
_SUMMARY_CHARS = 120
_MORE_CHARS = 64  # kept for the line that says how many more tools there are


@dataclass(frozen=True)
class _Typing:
    """How `Any` and `Literal` are spelled: privately in the module, plainly for the model."""

    any: str
    literal: str
    max_literals: int | None = None
    terse: bool = False  # for the reader: `**kwargs` without its annotation


_MODULE = _Typing("_Any", "_Literal")
_READER = _Typing("Any", "Literal", _SUMMARY_LITERALS, terse=True)


@dataclass(frozen=True)
class _Param:
    json_name: str
    name: str
    annotation: str
    required: bool

    def source(self) -> str:
        if self.required:
            return f"{self.name}: {self.annotation}"
        if self.annotation.endswith("Any") or self.annotation.endswith("None"):
            return f"{self.name}: {self.annotation} = None"
        return f"{self.name}: {self.annotation} | None = None"


def function_names(tools: Sequence[ToolView]) -> dict[str, str]:
    """Tool name -> the name of its function, unique, safe, as the module docstring says."""
    return _unique([tool.name for tool in tools], _TAKEN)


def unique_names(names: Sequence[str], taken: frozenset[str]) -> dict[str, str]:
    """Name -> a safe, unique identifier, as `function_names` makes them, with `taken` (and
    Python's keywords) given a trailing `_` (jsstubs passes JavaScript's reserved words)."""
    return _unique(names, taken)


def _unique(names: Sequence[str], taken: frozenset[str]) -> dict[str, str]:
    chosen: dict[str, str] = {}
    used: set[str] = set()
    # Names that need no change first: `fx_rate` keeps its name beside `fx-rate`.
    for name in sorted(names, key=lambda n: (_identifier(n, taken) != n, n)):
        safe = _identifier(name, taken)
        while safe in used:
            safe += "_"
        chosen[name] = safe
        used.add(safe)
    return chosen


def _identifier(name: str, taken: frozenset[str]) -> str:
    safe = _NOT_IDENTIFIER.sub("_", name) or "_"
    if safe[0].isdigit():
        safe = "_" + safe
    if keyword.iskeyword(safe) or safe in taken:
        safe += "_"
    return safe


def _argument_names(properties: Sequence[str]) -> dict[str, str]:
    return _unique(properties, frozenset({"_call", _MORE}))


def _takes_more(schema: Mapping[str, Any]) -> bool:
    """Whether the tool takes arguments its schema does not name (see the module docstring)."""
    extra = schema.get("additionalProperties")
    if extra is None:
        return not isinstance(schema.get("properties"), Mapping) or not schema["properties"]
    return extra is not False


def python_type(schema: object, spelled: _Typing = _READER, depth: int = 0) -> str:
    """The Python type a JSON Schema describes, as source text."""
    if not isinstance(schema, Mapping) or depth > _MAX_DEPTH:
        return spelled.any
    if "enum" in schema or "const" in schema:
        return _literal(schema["enum"] if "enum" in schema else [schema["const"]], spelled)
    for combined in ("anyOf", "oneOf"):
        if isinstance(schema.get(combined), list) and schema[combined]:
            return _union([python_type(s, spelled, depth + 1) for s in schema[combined]], spelled)
    kinds = schema.get("type")
    if isinstance(kinds, list):
        return _union([_one_type(k, schema, spelled, depth) for k in kinds], spelled)
    return _one_type(kinds, schema, spelled, depth)


def _one_type(kind: object, schema: Mapping[str, Any], spelled: _Typing, depth: int) -> str:
    if isinstance(kind, str) and kind in _SIMPLE:
        return _SIMPLE[kind]
    if kind == "null":
        return "None"
    if kind == "array":
        return f"list[{python_type(schema.get('items'), spelled, depth + 1)}]"
    if kind == "object":
        return f"dict[str, {spelled.any}]"
    return spelled.any


def _literal(values: object, spelled: _Typing) -> str:
    if not isinstance(values, list) or not values or not all(map(_plain, values)):
        return spelled.any
    shown = [repr(v) for v in values]
    if spelled.max_literals is not None and len(shown) > spelled.max_literals:
        shown = [*shown[: spelled.max_literals], "..."]
    return f"{spelled.literal}[{', '.join(shown)}]"


def _plain(value: object) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    return value is None or isinstance(value, str | int | bool)


def _union(types: list[str], spelled: _Typing) -> str:
    if spelled.any in types:
        return spelled.any
    unique = list(dict.fromkeys(types))
    if "None" in unique:  # last, as Python writes an optional type
        unique = [*(t for t in unique if t != "None"), "None"]
    return " | ".join(unique)


def _params(tool: ToolView, spelled: _Typing) -> list[_Param]:
    properties = tool.input_schema.get("properties")
    if not isinstance(properties, Mapping):
        return []
    required = tool.input_schema.get("required")
    needed = set(required) if isinstance(required, list) else set()
    names = _argument_names([str(p) for p in properties])
    params = [
        _Param(str(p), names[str(p)], python_type(s, spelled), p in needed)
        for p, s in properties.items()
    ]
    return sorted(params, key=lambda p: not p.required)  # required first, as a reader expects


def _returns(tool: ToolView, spelled: _Typing) -> str:
    return spelled.any if tool.output_schema is None else python_type(tool.output_schema, spelled)


def _signature(
    tool: ToolView, function: str, spelled: _Typing, star: str = "*, ", returns: str = ""
) -> str:
    listed = [p.source() for p in _params(tool, spelled)]
    params = ", ".join(listed)
    opening = star if listed else ""
    if _takes_more(tool.input_schema):
        more = f"**{_MORE}" if spelled.terse else f"**{_MORE}: {spelled.any}"
        params = ", ".join([*listed, more])  # `*, **kwargs` alone is no Python: no star then
    return f"{function}({opening}{params}) -> {returns or _returns(tool, spelled)}"


def _fields(tool: ToolView) -> str:
    """What a summary line says a tool returns: an object's fields by name, where its
    outputSchema names them (the model reads `r['rate']` off it), else its type."""
    schema = tool.output_schema
    properties = schema.get("properties") if isinstance(schema, Mapping) else None
    if not isinstance(properties, Mapping) or not properties:
        return _returns(tool, _READER)
    shown = [f"{str(k)!r}: {python_type(v)}" for k, v in list(properties.items())[:8]]
    return "{" + ", ".join(shown) + (", ..." if len(properties) > 8 else "") + "}"


def docstring(tool: ToolView) -> str:
    """The description, then each argument's description (the text describe_tools gives)."""
    lines = [tool.description.strip() or tool.title or tool.name]
    properties = tool.input_schema.get("properties")
    params = _params(tool, _READER)
    if params and isinstance(properties, Mapping):
        lines += ["", "Args:"]
        for param in params:
            lines += _argument_lines(param, properties.get(param.json_name), "    ")
    if tool.output_schema is not None:
        lines += ["", f"Returns: {python_type(tool.output_schema)}"]
        lines += _nested(tool.output_schema, "    ", 1)
    return "\n".join(lines)


def _argument_lines(param: _Param, schema: object, indent: str) -> list[str]:
    head = f"{indent}{param.name} ({param.annotation}{'' if param.required else ', optional'})"
    if param.name != param.json_name:
        head += f" [{param.json_name!r} in the tool's arguments]"
    return [*_described(head, schema, indent), *_nested(schema, indent + "    ", 1)]


def _described(head: str, schema: object, indent: str) -> list[str]:
    if not isinstance(schema, Mapping):
        return [head]
    text = str(schema.get("description") or "").strip()
    if "default" in schema:
        text = f"{text} (default {schema['default']!r})".strip()
    first, *rest = text.splitlines() or [""]
    return [f"{head}: {first}" if first else head, *(f"{indent}    {line}" for line in rest)]


def _nested(schema: object, indent: str, depth: int) -> list[str]:
    """The properties of an object (or of an array's items), with their descriptions."""
    if not isinstance(schema, Mapping) or depth > 2:
        return []
    if schema.get("type") == "array":
        return _nested(schema.get("items"), indent, depth)
    properties = schema.get("properties")
    if not isinstance(properties, Mapping):
        return []
    lines: list[str] = []
    for name, sub in properties.items():
        head = f"{indent}{name!r} ({python_type(sub)})"
        lines += [*_described(head, sub, indent), *_nested(sub, indent + "    ", depth + 1)]
    return lines


def _docstring_literal(text: str) -> str:
    """A string literal holding `text` (as `inspect.getdoc` reads it): triple-quoted and
    indented as the function's body when nothing in it can end or escape the quotes, else
    `repr`'s one line."""
    safe = all(ch == "\n" or ch.isprintable() for ch in text)
    if safe and '"""' not in text and "\\" not in text and not text.endswith('"'):
        return '"""' + text.replace("\n", "\n    ") + '"""'
    return repr(text)


_PRELUDE = '''\
"""The tools of this view as functions (made by Kiln: kiln.protocol.codestubs)."""

from typing import Any as _Any, Literal as _Literal

from kiln_tools import ToolCallError
from kiln_tools import tools as _tools


def _call(name, arguments, optional, more=None):
    """Call the tool `name` with the arguments given (an optional one left at None is not),
    and those its schema does not name (`from_` sends `from`)."""
    sent = {k: v for k, v in arguments.items() if v is not None or k not in optional}
    for key, value in (more or {}).items():
        sent[key[:-1] if key.endswith("_") and len(key) > 1 else key] = value
    return _tools.call(name, sent)
'''


def python_stubs(tools: Sequence[ToolView]) -> str:
    """The source of `kiln_view.py`: one typed function per tool, and `__all__` naming them."""
    names = function_names(tools)
    parts = [_PRELUDE]
    for tool in tools:
        params = _params(tool, _MODULE)
        arguments = ", ".join(f"{p.json_name!r}: {p.name}" for p in params)
        optional = "".join(f"{p.json_name!r}, " for p in params if not p.required)
        body = _docstring_literal(docstring(tool))
        more = f", {_MORE}" if _takes_more(tool.input_schema) else ""
        parts.append(
            f"\n\ndef {_signature(tool, names[tool.name], _MODULE)}:\n"
            f"    {body}\n"
            f"    return _call({tool.name!r}, {{{arguments}}}, ({optional}){more})\n"
        )
    exported = ", ".join(repr(names[tool.name]) for tool in tools)
    parts.append(f"\n\n__all__ = [{exported}]\n")
    return "".join(parts)


def python_stub_summary(tools: Sequence[ToolView], max_chars: int | None = None) -> str:
    """One line per tool for the model: its function's signature (`-> Any` left out), then
    its description's first line; every argument is keyword-only. Past `max_chars`, the lines
    that fit and how many more tools search_tools finds."""
    names = function_names(tools)
    lines: list[str] = []
    used = 0
    for index, tool in enumerate(tools):
        line = _summary_line(tool, names[tool.name])
        if max_chars is not None and used + len(line) + 1 > max_chars - _MORE_CHARS:
            lines.append(f"... and {len(tools) - index} more tools: find them with search_tools")
            break
        lines.append(line)
        used += len(line) + 1
    return "\n".join(lines)


def _summary_line(tool: ToolView, function: str) -> str:
    first = next((line.strip() for line in tool.description.splitlines() if line.strip()), "")
    if len(first) > _SUMMARY_CHARS:
        first = first[: _SUMMARY_CHARS - 1].rstrip() + "…"
    signature = _signature(tool, function, _READER, star="", returns=_fields(tool))
    signature = signature.removesuffix(" -> Any")
    return f"{signature}  # {first}" if first else signature


EXECUTE_WRAPPER = '''\
"""Kiln's execute: runs the model's code with the view's tools as functions (kiln_view.py)."""

import json
import linecache
import sys
import traceback

import kiln_view
from kiln_tools import ToolCallError, tools

FILENAME = "<execute>"
code = json.load(sys.stdin)["code"]
linecache.cache[FILENAME] = (len(code), None, code.splitlines(True), FILENAME)
scope = {"__name__": "__main__", "__builtins__": __builtins__}
scope.update((name, getattr(kiln_view, name)) for name in kiln_view.__all__)
scope.update(tools=tools, ToolCallError=ToolCallError)
try:
    exec(compile(code, FILENAME, "exec"), scope)
except SystemExit:
    raise
except BaseException as error:
    # The code's own lines only: Kiln's wrapper, stubs and helper are not the model's to read.
    frames = [f for f in traceback.extract_tb(error.__traceback__) if f.filename == FILENAME]
    told = traceback.format_list(frames) if frames else []
    head = ["Traceback (most recent call last):\\n"] if told else []
    sys.stderr.write("".join(head + told + traceback.format_exception_only(error)))
    sys.exit(1)
'''


def execute_program(tools: Sequence[ToolView]) -> tuple[str, dict[str, bytes]]:
    """The `execute` tool's script and the files beside it (its stubs) for a view's tools."""
    return EXECUTE_WRAPPER, {STUBS_FILE: python_stubs(tools).encode("utf-8")}
