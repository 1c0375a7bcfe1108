"""Search mode: three meta-tools stand in for a large list of tools.

In `search` mode (a view's `mode`, or the deployment's KILN_CATALOG_MODE for the root
catalog) `tools/list` answers `search_tools`, `describe_tools` and `call_tool` instead of
every tool the caller may see. Each works on exactly those tools (`Served.tools`, the list
`list` mode would show): a tool outside them is neither found, described nor called, and
naming it gets the error a direct `tools/call` of it gets (`Unknown tool: …`, -32602).

`call_tool` is a `tools/call` of the named tool, handed back to the dispatcher's own
`tools/call` path (the `Direct` callable): the caller's view, quotas, approvals, argument
checks, tasks and the ledger apply as to a direct call, and its result is that call's result.
Its inner call never reaches the meta-tools again (a tool named `call_tool` is a catalog tool
there), so it cannot recurse. `search_tools` and `describe_tools` run nothing: like
`tools/list`, they are not ledgered and spend no quota.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from kiln.protocol.backend import CallContext, Served, ToolView
from kiln.protocol.calling import ToolCaller, result, text_block, unknown_tool
from kiln.protocol.classify import Envelope
from kiln.protocol.listing import Finish, ToolLister

SEARCH, DESCRIBE, CALL = "search_tools", "describe_tools", "call_tool"
DEFAULT_LIMIT, MAX_LIMIT, MAX_NAMES = 5, 25, 20
_SUMMARY = 200  # characters of a description a search result shows

_READ_ONLY = {"readOnlyHint": True, "destructiveHint": False, "idempotentHint": True}


def _meta_tool(
    name: str, title: str, description: str, properties: dict[str, Any], *, read_only: bool
) -> ToolView:
    hints = {**_READ_ONLY, "title": title} if read_only else {"title": title, "openWorldHint": True}
    schema = {
        "type": "object",
        "properties": properties,
        "required": [next(iter(properties))],  # the first argument; the rest are optional
        "additionalProperties": False,
    }
    return ToolView(name, description, schema, title=title, annotations=hints)


META_TOOLS: tuple[ToolView, ...] = (
    _meta_tool(
        SEARCH,
        "Search tools",
        "Find the tools that can do a task. This server has more tools than it lists: "
        "describe what you want to do in plain words (e.g. 'convert pounds to yen', "
        "'open pull requests in a repo') and get the best matches, best first, each with "
        "its name, a short description and its argument names. Then call describe_tools "
        "for the full input schema of the one you choose, and call_tool to run it.",
        {
            "query": {
                "type": "string",
                "minLength": 1,
                "maxLength": 500,
                "description": "What you want to do, in a few words.",
            },
            "limit": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_LIMIT,
                "default": DEFAULT_LIMIT,
                "description": f"How many tools to return (default {DEFAULT_LIMIT}).",
            },
        },
        read_only=True,
    ),
    _meta_tool(
        DESCRIBE,
        "Describe tools",
        "Get the full definitions of tools by name: description, input schema (the "
        "arguments call_tool needs), output schema and annotations, exactly as a tool list "
        "gives them. Use it on names that search_tools returned.",
        {
            "names": {
                "type": "array",
                "items": {"type": "string", "minLength": 1},
                "minItems": 1,
                "maxItems": MAX_NAMES,
                "uniqueItems": True,
                "description": "The tools' names, as search_tools returned them.",
            },
        },
        read_only=True,
    ),
    _meta_tool(
        CALL,
        "Call a tool",
        "Run a tool by name with its arguments, as if it had been called directly; the "
        "answer is that tool's result. The arguments must match the input schema that "
        "describe_tools gives. Tools that change things may ask the user to approve.",
        {
            "name": {"type": "string", "minLength": 1, "description": "The tool's name."},
            "arguments": {
                "type": "object",
                "description": "The tool's arguments, matching its input schema.",
            },
        },
        read_only=False,
    ),
)
EXECUTE = "execute"
MAX_CODE_CHARS = 100_000
SMALL_VIEW = 20  # a code view this small lists execute alone, every function in its description
_FIND = "Find tools with search_tools and their arguments with describe_tools first."
_LISTED = "Its functions are below (describe_tools gives their full schemas)."
EXECUTE_TOOL = _meta_tool(
    EXECUTE,
    "Run code that calls tools",
    "Run Python code that calls this server's tools as functions, in one step, and get back "
    "what it prints. Every tool is a function of its name with keyword arguments (a name's "
    "'-' becomes '_'; add a trailing underscore to a Python keyword: from_='GBP'), returning "
    "the tool's structured result (else its text) and raising ToolCallError when the tool "
    f"fails. {_FIND} The "
    "code runs again from the top after each round of tool calls, with every result so "
    "far, so keep it deterministic (no randomness or clock before a call) and make tool "
    "calls its only side effects; tools.gather(('name', {args}), ...) makes independent "
    "calls in one round. Only "
    "the last run's output is the answer: print() what you need.",
    {
        "code": {
            "type": "string",
            "minLength": 1,
            "maxLength": MAX_CODE_CHARS,
            "description": "Python 3 source; print() the answer.",
        },
        "language": {
            "type": "string",
            "enum": ["python", "javascript"],
            "default": "python",
            "description": "javascript: the code runs in Node, each function taking one "
            "object of arguments (fx_rate({from: 'GBP'})); console.log() the answer.",
        },
    },
    read_only=False,
)
# Not destructive itself: each call its code makes is approved (or not) as a direct call is.
EXECUTE_TOOL = replace(
    EXECUTE_TOOL, annotations={**(EXECUTE_TOOL.annotations or {}), "destructiveHint": False}
)


def _for_code(tool: ToolView) -> ToolView:
    """A meta-tool's description as code mode shows it: tools are run by `execute`."""
    text = tool.description.replace(
        "call_tool to run it", "execute to run code that calls it"
    ).replace("the arguments call_tool needs", "the arguments its function takes in execute")
    return replace(tool, description=text)


# What tools/list shows per mode (list mode: the tools themselves).
SHOWN: dict[str, tuple[ToolView, ...]] = {
    "search": META_TOOLS,
    "code": (_for_code(META_TOOLS[0]), _for_code(META_TOOLS[1]), EXECUTE_TOOL),
}
NAMES = frozenset(tool.name for shown in SHOWN.values() for tool in shown)
_BY_NAME = {tool.name: tool for shown in SHOWN.values() for tool in shown}

# The dispatcher's own tools/call of a catalog tool (dispatch.py), for `call_tool`.
Direct = Callable[[Envelope, CallContext], Awaitable[bytes]]


def _index(entries: list[dict[str, Any]], tags: Mapping[str, tuple[str, ...]]) -> Any:
    from kiln.protocol.search import SearchIndex  # bm25s and numpy: search mode only

    return SearchIndex(entries, [tags.get(e["name"], ()) for e in entries])


def _summary(entry: dict[str, Any]) -> dict[str, Any]:
    text = " ".join(str(entry.get("description") or "").split())
    if len(text) > _SUMMARY:
        text = text[: _SUMMARY - 1].rsplit(" ", 1)[0] + "…"
    props = (entry.get("inputSchema") or {}).get("properties") or {}
    out: dict[str, Any] = {"name": entry["name"]}
    if entry.get("title"):
        out["title"] = entry["title"]
    out["description"] = text
    out["arguments"] = list(props)
    return out


def execute_with(tools: Sequence[ToolView]) -> ToolView:
    """`execute` as a small code view lists it: every function's signature in its text."""
    from kiln.protocol.codestubs import python_stub_summary

    text = EXECUTE_TOOL.description.replace(_FIND, _LISTED)
    return replace(EXECUTE_TOOL, description=f"{text}\n\n{python_stub_summary(tools)}")


class Discovery:
    def __init__(self, lister: ToolLister, caller: ToolCaller) -> None:
        self._lister = lister
        self._caller = caller
        # A small code view's list, by its tools (the backend hands out the same tuple while
        # nothing changed): made once, so that the lister's pages of it are cached too.
        self._small: dict[int, tuple[Sequence[ToolView], tuple[ToolView, ...]]] = {}

    def shown(self, served: Served) -> Sequence[ToolView]:
        """What tools/list shows: the tools (list mode), the meta-tools of search or code
        mode, or for a code view of at most SMALL_VIEW tools `execute` alone, which names
        every function (search and describe still answer when called)."""
        if served.mode != "code" or len(served.tools) > SMALL_VIEW:
            return SHOWN.get(served.mode, served.tools)
        kept = self._small.get(id(served.tools))
        if kept is not None and kept[0] is served.tools:
            return kept[1]
        if len(self._small) >= 64:
            self._small.clear()
        listed = (execute_with(served.tools),)
        self._small[id(served.tools)] = (served.tools, listed)
        return listed

    @staticmethod
    def claims(params: dict[str, Any]) -> bool:
        """This tools/call names a meta-tool (it is one only in search and code mode)."""
        return params.get("name") in NAMES

    @staticmethod
    def answers(name: str, mode: str) -> bool:
        """This mode shows the meta-tool `name`, and it is answered here (`execute` is not:
        the backend makes it a tool of the request's own, kiln.serving.codemode)."""
        return name != EXECUTE and any(tool.name == name for tool in SHOWN.get(mode, ()))

    async def answer(
        self,
        envelope: Envelope,
        ctx: CallContext,
        served: Served,
        direct: Direct,
        finish: Finish,
    ) -> bytes:
        """The result of a meta-tool's tools/call, serialised as the dispatcher sends it."""
        from kiln.protocol.jsontext import dumps

        tool = _BY_NAME[envelope.params["name"]]
        checked = await self._caller.check_arguments(tool, envelope.params.get("arguments", {}))
        if isinstance(checked, dict):  # arguments that break the meta-tool's schema
            return dumps(finish(checked))
        arguments = checked[1]
        if tool.name == CALL:
            return await direct(self._inner(envelope, arguments, ctx), ctx)
        if tool.name == SEARCH:
            found = await self._search(served, arguments, envelope.version)
        else:
            found = self._describe(served, arguments["names"], envelope)
        text = json.dumps({"tools": found}, ensure_ascii=False, separators=(",", ":"))
        return dumps(finish(result([text_block(text)], is_error=False)))

    async def _search(
        self, served: Served, arguments: dict[str, Any], version: str
    ) -> list[dict[str, Any]]:
        index = await self._lister.index(served.tools, _index)
        hits = index.search(arguments["query"], arguments.get("limit", DEFAULT_LIMIT))
        entries = self._lister.described(served.tools, {name for name, _ in hits}, version)
        return [_summary(entries[name]) for name, _ in hits if name in entries]

    def _describe(
        self, served: Served, names: list[str], envelope: Envelope
    ) -> list[dict[str, Any]]:
        entries = self._lister.described(served.tools, set(names), envelope.version)
        for name in names:
            if name not in entries:
                raise unknown_tool(name, envelope.request_id)
        return [entries[name] for name in names]

    @staticmethod
    def _inner(envelope: Envelope, arguments: dict[str, Any], ctx: CallContext) -> Envelope:
        """The direct tools/call `call_tool` stands for: its name and arguments, and the rest
        of the request's params as they came (a task, answers to its questions, `_meta`)."""
        params = {k: v for k, v in envelope.params.items() if k not in ("name", "arguments")}
        params["name"] = arguments["name"]
        params["arguments"] = arguments.get("arguments", {})
        if ctx.seen is not None:  # the edge logs the tool that ran
            ctx.seen.tool = arguments["name"]
        return replace(envelope, params=params)
