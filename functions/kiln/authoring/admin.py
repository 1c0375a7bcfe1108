"""The admin endpoint's tools: the catalog's own tools plus built-in `kiln_*` authoring tools.

An author's MCP client (on `/admin/mcp`, with an author key) can read the contract, create a
tool, read one with its source, list its revisions and update it, carrying the revision it
read so that nobody's change is overwritten. Every one of them is a call into the
authoring service; results are shaped by the same serialiser as REST bodies.
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from kiln.authoring.serialise import revision_json, tool_json
from kiln.authoring.service import AuthoringService
from kiln.catalog.errors import CatalogError
from kiln.catalog.rules import RuleError
from kiln.identity.policy import Principal
from kiln.protocol.backend import CallContext, ToolBackend, ToolOutcome, ToolView
from kiln.runner.ceiling import LAMBDA_MAX_TIMEOUT_S

INSTRUCTIONS = """\
# Writing a Kiln tool

A tool is a Python or Node script with a name, a description, an optional list of packages
and a JSON Schema for its inputs. Kiln runs the script as a child process for each call.

## The contract
- **Input**: one JSON object on stdin (the call's arguments). Read all of stdin and parse it.
  Schema defaults are not filled in: give fallbacks in code.
- **Output**: print once, to stdout. The client receives the printed text. Print JSON if a
  program will read it; with an `output_schema`, stdout must be JSON matching it.
- **Errors**: write details to stderr and exit non-zero. The result then carries
  `[stderr] ...` and `[exit N]` and is marked as an error. A successful run should write
  nothing to stderr, or the text gets a `[stderr]` part.
- **Time**: each tool has `timeout_seconds` (default 30, at most 900); at the limit the
  whole process tree is killed and the result says `[timeout]`.
- **Packages**: list them in `requirements` (pip specifiers for Python, npm names for Node);
  they are installed once when the tool is saved, never during a call.
- **Secrets**: never put them in code. An operator sets them with
  `kiln secrets set TOOL NAME`; the tool reads them from its environment. Never print them.
- **Environment**: a fresh working directory, no cloud credentials, no network promises.

## Python
```python
import json, sys
args = json.load(sys.stdin)
name = args.get("name", "world")
print(json.dumps({"message": f"Hello {name}"}))
```

## Node
```javascript
const fs = require('node:fs');
const args = JSON.parse(fs.readFileSync(0, 'utf8'));
console.log(JSON.stringify({ message: `Hello ${args.name || 'world'}` }));
```

## Using these tools
- `kiln_create_tool`: name, description, language (`python` or `node`), code, and
  optionally requirements, input_schema, output_schema, title, annotations, timeout_seconds,
  enabled. Names: a letter, then letters, digits, `_` or `-`; `kiln_` is reserved.
- `kiln_get_tool`: the definition, its source and its current `revision`.
- `kiln_update_tool`: `name`, the `revision` you read, and only the fields to change. If
  someone saved in between, you are told the current revision: read again, reapply. A change
  that breaks the tool's clients (a new required input, a narrowed type, a weaker annotation,
  a new secret...) is refused with the list of what it breaks; `breaking: true` saves it.
- `kiln_list_revisions`: every revision with who made it and when.
"""

_DEFINITION: dict[str, Any] = {
    "title": {"type": "string", "description": "A short human-readable title."},
    "description": {"type": "string", "description": "What the tool does, for the model."},
    "language": {"type": "string", "enum": ["python", "node"]},
    "code": {"type": "string", "description": "The whole script."},
    "requirements": {
        "type": "array",
        "items": {"type": "string"},
        "description": "pip specifiers (Python) or npm packages (Node).",
    },
    "input_schema": {"type": "object", "description": "JSON Schema of the arguments."},
    "output_schema": {"type": "object", "description": "JSON Schema of the printed JSON."},
    "annotations": {"type": "object", "description": "readOnlyHint, destructiveHint, ..."},
    "timeout_seconds": {"type": "number", "exclusiveMinimum": 0, "maximum": LAMBDA_MAX_TIMEOUT_S},
    "enabled": {"type": "boolean"},
    "task": {
        "type": ["string", "null"],
        "enum": ["optional", "required", None],
        "description": "Let calls run as MCP tasks, past the request (long-running tools).",
    },
    "secrets": {
        "type": "array",
        "items": {"type": "string"},
        "description": "Names of secrets the script reads from its environment (values are "
        "set by an operator with `kiln secrets set`).",
    },
    "tags": {
        "type": "array",
        "items": {"type": "string"},
        "description": "Short lower-case labels; views can select tools by tag.",
    },
    "calls": {
        "type": "array",
        "items": {"type": "string"},
        "description": "Tools this tool's script may call, by name (see TALKING.md).",
    },
}
_NAME = {"type": "string", "description": "The tool's name."}


def _schema(properties: Mapping[str, Any], required: Sequence[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": dict(properties),
        "required": list(required),
        "additionalProperties": False,
    }


_BREAKING = {
    "type": "boolean",
    "description": "Save even though the change breaks the tool's clients (refused otherwise).",
}
_READ_ONLY = {"readOnlyHint": True, "destructiveHint": False, "idempotentHint": True}
VIEWS: dict[str, ToolView] = {
    view.name: view
    for view in (
        ToolView(
            "kiln_instructions",
            "How to write a Kiln tool: the script contract, examples, and how to use the "
            "kiln_* authoring tools. Read this before creating a tool.",
            _schema({}, []),
            title="Kiln: how to write a tool",
            annotations={**_READ_ONLY, "openWorldHint": False},
        ),
        ToolView(
            "kiln_create_tool",
            "Create a new tool in the catalog. Fails if the name is taken or a rule is broken "
            "(every broken rule is listed).",
            _schema({"name": _NAME, **_DEFINITION}, ["name", "description", "language", "code"]),
            title="Kiln: create a tool",
            annotations={"readOnlyHint": False, "destructiveHint": False, "openWorldHint": False},
        ),
        ToolView(
            "kiln_update_tool",
            "Save a new revision of a tool: give its name, the revision you read (from "
            "kiln_get_tool) and only the fields to change.",
            _schema(
                {
                    "name": _NAME,
                    "revision": {"type": "integer", "minimum": 1},
                    **_DEFINITION,
                    "breaking": _BREAKING,
                },
                ["name", "revision"],
            ),
            title="Kiln: update a tool",
            annotations={"readOnlyHint": False, "destructiveHint": True, "openWorldHint": False},
        ),
        ToolView(
            "kiln_get_tool",
            "Read a tool: its definition, its source code and its current revision.",
            _schema({"name": _NAME}, ["name"]),
            title="Kiln: read a tool",
            annotations={**_READ_ONLY, "openWorldHint": False},
        ),
        ToolView(
            "kiln_list_revisions",
            "List a tool's revisions, newest last, with who saved each and when.",
            _schema({"name": _NAME}, ["name"]),
            title="Kiln: list a tool's revisions",
            annotations={**_READ_ONLY, "openWorldHint": False},
        ),
    )
}


def _ok(body: Any) -> ToolOutcome:
    text = body if isinstance(body, str) else json.dumps(body, ensure_ascii=False, indent=1)
    return ToolOutcome(text, False, stdout=text)


Handler = Callable[[Mapping[str, Any], Principal | None], Awaitable[ToolOutcome]]


class AdminBackend:
    """`ToolBackend` for `/admin/mcp`: every catalog tool, then the `kiln_*` tools."""

    def __init__(self, catalog: ToolBackend, authoring: AuthoringService) -> None:
        self._catalog = catalog
        self._authoring = authoring
        self._handlers: dict[str, Handler] = {
            "kiln_instructions": self._instructions,
            "kiln_create_tool": self._create,
            "kiln_update_tool": self._update,
            "kiln_get_tool": self._get,
            "kiln_list_revisions": self._revisions,
        }

    async def list_tools(self, ctx: CallContext) -> Sequence[ToolView]:
        return [*await self._catalog.list_tools(ctx), *VIEWS.values()]

    async def get_tool(self, name: str, ctx: CallContext) -> ToolView | None:
        return VIEWS.get(name) or await self._catalog.get_tool(name, ctx)

    async def record_rejected(self, tool: ToolView, arguments: Any, ctx: CallContext) -> None:
        """A catalog tool's call refused for its arguments goes to the ledger (serving.backend)."""
        record = getattr(self._catalog, "record_rejected", None)
        if tool.name not in VIEWS and record is not None:
            await record(tool, arguments, ctx)

    async def call_tool(
        self, tool: ToolView, arguments: Mapping[str, Any], ctx: CallContext
    ) -> ToolOutcome:
        handler = self._handlers.get(tool.name)
        if handler is None:
            return await self._catalog.call_tool(tool, arguments, ctx)
        principal = ctx.principal if isinstance(ctx.principal, Principal) else None
        try:
            return await handler(arguments, principal)
        except RuleError as error:
            lines = [f"- {v.field}: {v.message} ({v.rule})" for v in error.violations]
            return ToolOutcome("The tool was not saved:\n" + "\n".join(lines), True)
        except CatalogError as error:
            return ToolOutcome(str(error), True)

    async def _instructions(self, _: Mapping[str, Any], __: Principal | None) -> ToolOutcome:
        return _ok(INSTRUCTIONS)

    async def _create(self, args: Mapping[str, Any], who: Principal | None) -> ToolOutcome:
        tool = await asyncio.to_thread(self._authoring.create, args, who)
        return _ok({"created": tool.name, "revision": tool.head.number, "id": tool.id})

    async def _update(self, args: Mapping[str, Any], who: Principal | None) -> ToolOutcome:
        changes = {k: v for k, v in args.items() if k != "revision"}
        tool = await asyncio.to_thread(
            functools.partial(
                self._authoring.update,
                str(args["name"]),
                changes,
                who,
                expected_revision=int(args["revision"]),
                partial=True,
            )
        )
        return _ok({"updated": tool.name, "revision": tool.head.number})

    async def _get(self, args: Mapping[str, Any], _: Principal | None) -> ToolOutcome:
        found = await asyncio.to_thread(self._authoring.read, str(args["name"]))
        return _ok(tool_json(found.tool, code=found.code, files=found.files))

    async def _revisions(self, args: Mapping[str, Any], _: Principal | None) -> ToolOutcome:
        revisions = await asyncio.to_thread(self._authoring.revisions, str(args["name"]))
        return _ok({"name": args["name"], "revisions": [revision_json(r) for r in revisions]})
