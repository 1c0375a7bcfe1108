"""`kiln stdio --url` tells the server, which keeps no session, what its client declared at
initialize: in each 2025 tools/call's `_meta`, and nowhere else."""

from __future__ import annotations

import json
from typing import Any

from kiln.local.bridge import Bridge

CAPS = "io.modelcontextprotocol/clientCapabilities"
DECLARED = {"elicitation": {"form": {}, "url": {}}}


def relayed(bridge: Bridge, message: dict[str, Any]) -> Any:
    return json.loads(bridge.carry_capabilities(message, json.dumps(message).encode()))


def initialized() -> Bridge:
    bridge = Bridge("http://127.0.0.1:1", "key")
    hello = {"protocolVersion": "2025-11-25", "capabilities": DECLARED, "clientInfo": {}}
    relayed(bridge, {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": hello})
    return bridge


def call(**params: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "t", "arguments": {}, **params}}  # fmt: skip


def test_a_2025_tools_call_carries_what_the_client_declared_at_initialize() -> None:
    sent = relayed(initialized(), call(_meta={"progressToken": 3}))
    assert sent["params"]["_meta"] == {"progressToken": 3, CAPS: DECLARED}
    assert sent["params"]["name"] == "t"


def test_a_call_before_initialize_is_relayed_as_it_is() -> None:
    bridge = Bridge("http://127.0.0.1:1", "key")
    assert relayed(bridge, call()) == call()


def test_what_a_request_says_itself_is_kept_and_other_methods_are_untouched() -> None:
    bridge = initialized()
    own = call(_meta={CAPS: {}})
    assert relayed(bridge, own) == own
    modern = call(_meta={"io.modelcontextprotocol/protocolVersion": "2026-07-28", CAPS: {}})
    assert relayed(bridge, modern) == modern
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}
    assert relayed(bridge, listing) == listing
    odd = call(_meta="not an object")
    assert relayed(bridge, odd) == odd
