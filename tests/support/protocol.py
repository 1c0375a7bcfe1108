"""A small in-memory ToolBackend and a client that drives McpEndpoint the way the app does."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kiln.protocol import (
    CallContext,
    HttpRequest,
    HttpResponse,
    McpEndpoint,
    ToolOutcome,
    ToolView,
)

MODERN = "2026-07-28"
META_PV = "io.modelcontextprotocol/protocolVersion"
META_CAPS = "io.modelcontextprotocol/clientCapabilities"
META_INFO = "io.modelcontextprotocol/clientInfo"
SERVER_INFO = "io.modelcontextprotocol/serverInfo"

ADD_VAT_SCHEMA = {
    "type": "object",
    "properties": {
        "net": {"type": "number", "minimum": 0},
        "rate": {"type": "number", "minimum": 0, "maximum": 100},
    },
    "required": ["net"],
    "additionalProperties": False,
}

Runner = Callable[[ToolView, Mapping[str, Any]], ToolOutcome]


def add_vat(tool: ToolView, args: Mapping[str, Any]) -> ToolOutcome:
    net = args["net"]
    rate = args.get("rate", 20)
    out = json.dumps({"net": net, "rate": rate, "gross": round(net * (1 + rate / 100), 2)})
    return ToolOutcome(text=out, is_error=False, stdout=out)


@dataclass
class FakeBackend:
    """Tools held in memory; runs are Python callables instead of child processes."""

    tools: list[ToolView] = field(default_factory=list)
    runners: dict[str, Runner] = field(default_factory=dict)
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    fail_with: Exception | None = None

    def add(self, tool: ToolView, runner: Runner | None = None) -> None:
        self.tools.append(tool)
        if runner is not None:
            self.runners[tool.name] = runner

    async def list_tools(self, ctx: CallContext) -> Sequence[ToolView]:
        if self.fail_with is not None:
            raise self.fail_with
        return self.tools

    async def get_tool(self, name: str, ctx: CallContext) -> ToolView | None:
        return next((t for t in self.tools if t.name == name), None)

    async def call_tool(
        self, tool: ToolView, arguments: Mapping[str, Any], ctx: CallContext
    ) -> ToolOutcome:
        if self.fail_with is not None:
            raise self.fail_with
        self.calls.append((tool.name, dict(arguments)))
        runner = self.runners.get(tool.name)
        if runner is None:
            return ToolOutcome(text="(no output)", is_error=False, stdout="")
        return runner(tool, arguments)


def printing(stdout: str, *, is_error: bool = False, text: str | None = None) -> Runner:
    """A runner whose tool prints `stdout` (the contract text defaults to stdout)."""

    def run(tool: ToolView, args: Mapping[str, Any]) -> ToolOutcome:
        return ToolOutcome(text=stdout if text is None else text, is_error=is_error, stdout=stdout)

    return run


def add_vat_tool(**overrides: Any) -> ToolView:
    fields: dict[str, Any] = {
        "name": "add_vat",
        "description": "Add UK VAT to a net amount.",
        "input_schema": ADD_VAT_SCHEMA,
        "updated_at": "2026-11-01T00:00:00Z",
    }
    fields.update(overrides)
    return ToolView(**fields)


def meta(version: str = MODERN, **extra: Any) -> dict[str, Any]:
    return {META_PV: version, META_CAPS: {}, META_INFO: {"name": "t", "version": "1"}, **extra}


def b64(text: str) -> str:
    return "=?base64?" + base64.b64encode(text.encode()).decode() + "?="


@dataclass
class Client:
    """Sends requests into an McpEndpoint as the app would, without a network."""

    endpoint: McpEndpoint
    principal: Any = None

    def raw(
        self, body: bytes, headers: Mapping[str, str] | None = None, method: str = "POST"
    ) -> HttpResponse:
        hdrs = {"content-type": "application/json", "host": "127.0.0.1:8000"}
        hdrs.update({k.lower(): v for k, v in (headers or {}).items()})
        request = HttpRequest(method=method, headers=hdrs, body=body)
        ctx = CallContext(principal=self.principal)
        return asyncio.run(self.endpoint.handle(request, ctx))

    def post(self, message: Any, headers: Mapping[str, str] | None = None) -> HttpResponse:
        return self.raw(json.dumps(message).encode(), headers)

    def legacy(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        *,
        version: str | None = "2025-11-25",
        rid: Any = 1,
    ) -> HttpResponse:
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            message["params"] = params
        headers = {"mcp-protocol-version": version} if version else {}
        return self.post(message, headers)

    def modern(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        *,
        rid: Any = 1,
        headers: Mapping[str, str] | None = None,
        name: str | None = None,
    ) -> HttpResponse:
        params = dict(params or {})
        params.setdefault("_meta", meta())
        message = {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}
        hdrs = {"mcp-protocol-version": MODERN, "mcp-method": method}
        if name is not None:
            hdrs["mcp-name"] = name
        elif method == "tools/call" and isinstance(params.get("name"), str):
            hdrs["mcp-name"] = params["name"]
        hdrs.update(headers or {})
        return self.post(message, hdrs)


def body(response: HttpResponse) -> Any:
    return json.loads(response.body)
