"""What the protocol tells the edge of a request (`CallContext.seen`), so that Lambda's log line
and metrics need no second parse of the body: the method, a call's tool, and how it ended. A
timeout is the run's typed `timed_out`, whatever its text says."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from kiln.protocol import HttpRequest, McpEndpoint, ProtocolSettings
from kiln.protocol.backend import CallContext, Seen, ToolOutcome, ToolView
from support.protocol import FakeBackend, add_vat, add_vat_tool

HEADERS = {"content-type": "application/json", "accept": "application/json"}


def killed(tool: ToolView, args: Any) -> ToolOutcome:
    return ToolOutcome("(no output)\nstopped at the limit", True, timed_out=True)


def says_timeout(tool: ToolView, args: Any) -> ToolOutcome:
    return ToolOutcome("[timeout] is only what the tool printed", True)


def seen_for(body: Any) -> Seen:
    backend = FakeBackend()
    backend.add(add_vat_tool(), add_vat)
    backend.add(add_vat_tool(name="slow"), killed)
    backend.add(add_vat_tool(name="liar"), says_timeout)
    endpoint = McpEndpoint(backend, ProtocolSettings(cursor_secret=b"unit-test-secret"))
    seen = Seen()
    request = HttpRequest("POST", HEADERS, json.dumps(body).encode())
    asyncio.run(endpoint.handle(request, CallContext(time_left_s=30.0, seen=seen)))
    return seen


def call(name: str, rid: int = 1) -> dict[str, Any]:
    params = {"name": name, "arguments": {"net": 10}}
    return {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params}


def test_a_call_is_told_with_its_tool_and_outcome() -> None:
    assert seen_for(call("add_vat")) == Seen("tools/call", "add_vat", "ok")


def test_a_timeout_is_the_runs_typed_field_not_its_text() -> None:
    assert seen_for(call("slow")) == Seen("tools/call", "slow", "timeout")
    assert seen_for(call("liar")) == Seen("tools/call", "liar", "error")


def test_a_refused_request_is_rejected_with_what_it_named() -> None:
    assert seen_for(call("nope")) == Seen("tools/call", "nope", "rejected")


def test_other_methods_name_no_tool() -> None:
    ping = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    assert seen_for(ping) == Seen("tools/list", None, None)


def test_a_batch_tells_nothing_of_its_many_methods() -> None:
    assert seen_for([call("add_vat", 1), call("slow", 2)]) == Seen()
