"""Hostile requestState through real HTTP: 1,000 forged values, every one refused, nothing run.

Fuzzed (characters changed), truncated, extended, re-spelled, random, and real states used by
another caller (the author's key on /admin/mcp), for another tool, or with other arguments.
Every call must get JSON-RPC -32602 with the spec's wording, never a 5xx, and the runner must
not start a single run of the tools involved (counted from its own `tool run` log records).
"""

from __future__ import annotations

import base64
import logging
import random
import string
from collections.abc import Iterator
from typing import Any

import pytest

from support.app import AUTHOR_KEY, META_CAPS, McpServer, meta, start_kiln

CAPS = {"elicitation": {}, "sampling": {}, "roots": {}}
TOOLS = ("test_input_required_result_tampered_state", "test_elicitation")
ALPHABET = string.ascii_letters + string.digits + "-_"


@pytest.fixture(scope="module")
def server(moto_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[McpServer]:
    yield from start_kiln(moto_endpoint, tmp_path_factory.mktemp("hostile-state"))


class RunCounter(logging.Handler):
    """Counts the runner's `tool run` records of the tools under attack."""

    def __init__(self) -> None:
        super().__init__()
        self.runs = 0

    def emit(self, record: logging.LogRecord) -> None:
        if str(getattr(record, "tool", "")).split("@")[0] in TOOLS:
            self.runs += 1


def call(
    server: McpServer, name: str, state: Any, arguments: dict[str, Any], *, admin: bool = False
) -> tuple[int, dict[str, Any]]:
    params = {
        "name": name,
        "arguments": arguments,
        "inputResponses": {"confirm": {"action": "accept", "content": {"ok": True}}},
        "requestState": state,
        "_meta": {**meta(), META_CAPS: CAPS},
    }
    headers = {"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": name}
    if admin:
        headers["Authorization"] = f"Bearer {AUTHOR_KEY}"
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
    url = server.url.removesuffix("/mcp") + ("/admin/mcp" if admin else "/mcp")
    response = server.http.post(
        url,
        json=body,
        headers={"Content-Type": "application/json", "Accept": "application/json", **headers},
    )
    return response.status_code, response.json()


def fresh_state(server: McpServer, name: str, arguments: dict[str, Any]) -> str:
    params = {"name": name, "arguments": arguments, "_meta": {**meta(), META_CAPS: CAPS}}
    result = server.modern("tools/call", params).json()["result"]
    assert result["resultType"] == "input_required", result
    return str(result["requestState"])


def forgeries(rng: random.Random, state: str) -> Iterator[tuple[str, Any]]:
    body = state[3:]
    for _ in range(300):  # one to three characters changed anywhere, prefix included
        chars = list(state)
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(len(chars))
            chars[at] = rng.choice([c for c in ALPHABET if c != chars[at]])
        yield "fuzzed", "".join(chars)
    for _ in range(150):
        yield "truncated", state[: rng.randrange(len(state))]
    for _ in range(50):
        yield "extended", state + "".join(rng.choices(ALPHABET, k=rng.randint(1, 8)))
    for _ in range(50):  # the same bytes spelled differently, or wrapped in junk
        yield "respelled", rng.choice(["k1." + body + "==", "k1." + body + "\n", " " + state])
    for _ in range(115):
        raw = rng.randbytes(rng.randint(0, 300))
        yield "random", rng.choice(["k1.", "", "k2."]) + base64.urlsafe_b64encode(raw).decode()
    for value in (0, 1.5, True, [], {}, [state], {"state": state}):
        for _ in range(5):
            yield "not a string", value


def test_a_thousand_forged_states_are_all_refused_and_start_no_run(server: McpServer) -> None:
    counter = RunCounter()
    logging.getLogger("kiln.runner").addHandler(counter)
    try:
        state = fresh_state(server, TOOLS[0], {})
        other_args = fresh_state(server, TOOLS[1], {"message": "one"})
        rng = random.Random(2322)
        attempts: list[tuple[str, str, Any, dict[str, Any], bool]] = [
            (kind, TOOLS[0], forged, {}, False) for kind, forged in forgeries(rng, state)
        ]
        for _ in range(100):  # replayed by another caller: the author's key
            attempts.append(("another caller", TOOLS[0], state, {}, True))
        for _ in range(100):  # swapped: another tool's state, or other arguments
            attempts.append(("another tool", TOOLS[0], other_args, {}, False))
            attempts.append(("other arguments", TOOLS[1], other_args, {"message": "two"}, False))
        attempts = attempts[:1000]
        assert len(attempts) == 1000
        runs_before = counter.runs
        outcomes: dict[str, int] = {}
        for kind, name, forged, arguments, admin in attempts:
            status, payload = call(server, name, forged, arguments, admin=admin)
            assert status < 500, (kind, forged, payload)
            error = payload.get("error")
            assert error is not None, (kind, forged, payload)
            assert error["code"] == -32602, (kind, forged, error)
            assert "requestState" in error["message"], (kind, error)
            outcomes[kind] = outcomes.get(kind, 0) + 1
        assert counter.runs == runs_before, f"{counter.runs - runs_before} runs started"
        assert set(outcomes) == {
            "fuzzed", "truncated", "extended", "respelled", "random", "not a string",
            "another caller", "another tool", "other arguments",
        }  # fmt: skip
        # The real state still works for its own call: the refusals were about the forgeries.
        status, payload = call(server, TOOLS[0], state, {})
        assert payload["result"]["content"][0]["text"] == "confirmed: accept", payload
    finally:
        logging.getLogger("kiln.runner").removeHandler(counter)
