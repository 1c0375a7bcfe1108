"""A schema cannot stall the server: RE2 patterns, validation off the event loop, a budget."""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx

from support.app import RunningKiln

EVIL_INPUT = "a" * 27 + "!"  # ^(a+)+$ against this took 3 s of Python's re on the event loop

# Two equal branches at every level of a nested array: 2^depth evaluations without a budget.
_NODE = {"anyOf": [{"type": "array", "items": {"$ref": "#/$defs/n"}}] * 2}
COSTLY_SCHEMA = {
    "type": "object",
    "$defs": {"n": _NODE},
    "properties": {"x": {"$ref": "#/$defs/n"}},
}


def _save(server: RunningKiln, name: str, schema: dict[str, Any]) -> httpx.Response:
    tool = {
        "name": name,
        "description": "Echoes its arguments.",
        "language": "python",
        "code": "import sys\nprint(sys.stdin.read())\n",
        "input_schema": schema,
    }
    return server.api("POST", "/api/tools", json=tool)


def _call(server: RunningKiln, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    message = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments},
    }
    result: dict[str, Any] = server.mcp(
        message, headers={"MCP-Protocol-Version": "2025-11-25"}
    ).json()["result"]
    return result


def test_a_backtracking_pattern_is_checked_in_linear_time_and_the_value_refused(
    kiln_server: RunningKiln,
) -> None:
    schema = {"type": "object", "properties": {"s": {"type": "string", "pattern": "^(a+)+$"}}}
    assert _save(kiln_server, "pattern_tool", schema).status_code == 201
    result = _call(kiln_server, "pattern_tool", {"s": EVIL_INPUT})
    assert result["isError"] is True
    assert result["content"][0]["text"] == (
        "Invalid arguments for tool 'pattern_tool':\n- s: must match the pattern \"^(a+)+$\""
    )


def test_a_pattern_re2_cannot_evaluate_is_refused_on_save(kiln_server: RunningKiln) -> None:
    schema = {"type": "object", "properties": {"s": {"type": "string", "pattern": "^(?!x).*"}}}
    response = _save(kiln_server, "lookahead_tool", schema)
    assert response.status_code == 422
    [violation] = response.json()["error"]["violations"]
    assert (violation["field"], violation["rule"]) == (
        "input_schema.properties.s.pattern",
        "pattern",
    )


def test_a_costly_validation_gives_up_at_its_budget_while_health_keeps_answering(
    kiln_server: RunningKiln,
) -> None:
    assert _save(kiln_server, "costly_tool", COSTLY_SCHEMA).status_code == 201
    deep: Any = "leaf"
    for _ in range(40):
        deep = [deep]
    outcome: list[dict[str, Any]] = []
    with httpx.Client(timeout=60) as other:
        caller = threading.Thread(
            target=lambda: outcome.append(_call(kiln_server, "costly_tool", {"x": deep}))
        )
        caller.start()
        answered_meanwhile = 0
        while caller.is_alive():
            if other.get(kiln_server.url + "/api/health").status_code == 200 and caller.is_alive():
                answered_meanwhile += 1
        caller.join()
    [result] = outcome
    assert result["isError"] is True
    assert "took more than 1.0 s of CPU time" in result["content"][0]["text"]
    # A blocked event loop would answer health only after the call: here it answers throughout.
    assert answered_meanwhile >= 3


def test_a_large_array_under_unique_items_is_checked_in_linear_time_beside_other_calls(
    kiln_server: RunningKiln,
) -> None:
    """6,000 objects (about 270 KB) cannot be sorted: jsonschema compared every pair, 18
    million comparisons holding the GIL (tens of seconds) while other callers waited."""
    schema = {"type": "object", "properties": {"xs": {"type": "array", "uniqueItems": True}}}
    assert _save(kiln_server, "unique_tool", schema).status_code == 201
    assert _save(kiln_server, "plain_tool", {"type": "object"}).status_code == 201
    items: list[Any] = [{"item": i, "label": f"{i:06d}-" + "x" * 24} for i in range(6_000)]
    outcome: list[Any] = []

    def big_call() -> None:
        message = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "unique_tool", "arguments": {"xs": [*items, items[0]]}},
        }
        headers = {"Accept": "application/json, text/event-stream",
                   "MCP-Protocol-Version": "2025-11-25"}  # fmt: skip
        try:
            answer = httpx.post(kiln_server.url + "/mcp", json=message, headers=headers,
                                timeout=30)  # fmt: skip
            outcome.append(answer.json()["result"])
        except httpx.TimeoutException as error:
            outcome.append(f"no answer in 30 s ({type(error).__name__})")

    caller = threading.Thread(target=big_call)
    caller.start()
    waits: list[float] = []
    while caller.is_alive() or not waits:  # another caller's call, all along
        started = time.monotonic()
        other = _call(kiln_server, "plain_tool", {})
        waits.append(time.monotonic() - started)
        assert other["isError"] is False, other
    caller.join()
    # Held behind a check that holds the GIL, they waited as long as it ran.
    assert max(waits) < 10, f"another caller waited {max(waits):.1f} s"
    [result] = outcome
    assert isinstance(result, dict), result
    assert result["isError"] is True, result
    assert result["content"][0]["text"] == (
        "Invalid arguments for tool 'unique_tool':\n- xs: must not contain duplicate items"
    )
