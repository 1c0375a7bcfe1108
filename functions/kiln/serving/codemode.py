"""Code mode: `execute(code)` runs the model's Python as a one-off tool that calls the view's tools.

In a view's `code` mode (or the root catalog's, KILN_CATALOG_MODE=code) `tools/list` shows
`search_tools`, `describe_tools` and `execute` (kiln.protocol.discovery). A call of `execute`
is a call of a tool made here for that request, `CodeMode.tool`: no catalog revision, the same
path as any tool from admission on (quotas, the ledger, the runner with its limits, deadline,
output cap and containment: model-written code is hostile input). Its program is a wrapper
that runs the model's code with one typed function per tool of the view in its globals (stubs
whose docstrings are the descriptions and argument descriptions `describe_tools` gives), and
each function's call is an inner call (kiln.protocol.inner): back through the gate as the
same caller, its own ledger entry naming the `execute` call as its parent. Its `calls` are the
view's tools, so the code reaches exactly what the caller could call directly.

Each caller and view has a runner tenant of its own (`code-<digest of caller and view>`): on
Lambda one caller's code never shares an execution environment with a tool's runs or with
another caller's code. The program depends only on the view's tools at one catalog version,
so it is made once per view and version and kept (a few, least recently used first out).
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from kiln.catalog.model import Revision, Tool
from kiln.protocol.discovery import EXECUTE, EXECUTE_TOOL
from kiln.serving.resolved import tool_view

KEPT_PROGRAMS = 64
TIMEOUT_S = 30.0  # as a tool's default (kiln.catalog.model.Draft.timeout_seconds)


@dataclass(frozen=True)
class Program:
    """What a run of `execute` runs: the wrapper, and the view's stubs beside it."""

    code: str
    files: Mapping[str, bytes]
    calls: tuple[str, ...]  # the view's tools: what its code may call
    digest: str = ""  # of the code and files: the made revision's code_sha256

    @classmethod
    def of(cls, code: str, files: Mapping[str, bytes], calls: tuple[str, ...]) -> Program:
        parts = hashlib.sha256(code.encode())
        for name, data in sorted(files.items()):
            parts.update(b"\0" + name.encode() + b"\0" + hashlib.sha256(data).digest())
        return cls(code, files, calls, parts.hexdigest())


class CodeMode:
    """Makes the `execute` tool of a request in code mode, and keeps its programs."""

    def __init__(self, timeout_s: float = TIMEOUT_S) -> None:
        self._timeout_s = timeout_s
        self._lock = threading.Lock()
        self._by_view: OrderedDict[tuple[str | None, int], Program] = OrderedDict()
        self._by_digest: dict[str, Program] = {}
        self._js: dict[str, Program] = {}  # a Python program's digest -> its JavaScript one

    def tool(self, view: str | None, caller: str, tools: Mapping[str, Tool], version: int) -> Tool:
        """The `execute` tool of `caller` in `view` (None: the root catalog) at `version`."""
        program = self._program(view, tools, version)
        tenant = hashlib.sha256(f"{caller}\0{view or ''}".encode()).hexdigest()[:32]
        head = Revision(
            tool_id=f"code-{tenant}", number=version, description=EXECUTE_TOOL.description,
            language="python", code_key="", code_sha256=program.digest, requirements=(),
            input_schema=EXECUTE_TOOL.input_schema, output_schema=None,
            title=EXECUTE_TOOL.title, annotations=EXECUTE_TOOL.annotations,
            timeout_seconds=self._timeout_s, bundle_id=None, created_at="",
            calls=program.calls,
        )  # fmt: skip
        return Tool(f"code-{tenant}", EXECUTE, True, head, "", "")

    def in_language(self, tool: Tool, arguments: Mapping[str, Any]) -> Tool:
        """`execute` in the language its call asks for: Python (as made), or JavaScript
        (kiln.protocol.jsstubs), the same view's functions, the same tenant."""
        program = self.source(tool.head)
        if program is None or arguments.get("language") != "javascript":
            return tool
        with self._lock:
            js = self._js.get(program.digest)
        if js is None:
            from kiln.protocol.jsstubs import js_program

            js = Program.of(*js_program(program.calls), program.calls)
            with self._lock:
                self._js[program.digest] = js
                self._by_digest[js.digest] = js
        return replace(tool, head=replace(tool.head, language="node", code_sha256=js.digest))

    def source(self, head: Revision) -> Program | None:
        """The program of an `execute` tool this object made (None: a catalog revision)."""
        if not head.tool_id.startswith("code-"):
            return None
        with self._lock:
            return self._by_digest.get(head.code_sha256)

    def _program(self, view: str | None, tools: Mapping[str, Tool], version: int) -> Program:
        with self._lock:
            kept = self._by_view.get((view, version))
            if kept is not None:
                self._by_view.move_to_end((view, version))
                return kept
        from kiln.protocol.codestubs import execute_program  # code mode only: not at a cold start

        shown = [tool_view(tool) for _, tool in sorted(tools.items()) if tool.enabled]
        code, files = execute_program(shown)
        program = Program.of(code, files, tuple(t.name for t in shown))
        with self._lock:
            self._by_view[(view, version)] = program
            self._by_digest[program.digest] = program
            while len(self._by_view) > KEPT_PROGRAMS:
                _, dropped = self._by_view.popitem(last=False)
                self._by_digest.pop(dropped.digest, None)
                js = self._js.pop(dropped.digest, None)
                if js is not None:
                    self._by_digest.pop(js.digest, None)
        return program
