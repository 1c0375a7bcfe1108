"""`kill -9` of a real `kiln dev` in the middle of a burst of calls: every answer a client
received, a result or a 429, has its ledger entry after a restart."""

from __future__ import annotations

import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from support.devserver import DevProcess, start_dev

CALLERS = 6
CALLS_EACH = 40


def call(dev: DevProcess, key: str, index: int) -> int | None:
    """The status of one tools/call, None when no answer arrived (the server died)."""
    body = {"jsonrpc": "2.0", "id": index, "method": "tools/call",
            "params": {"name": "add_one", "arguments": {"n": index}}}  # fmt: skip
    headers = {"Authorization": f"Bearer {key}", "MCP-Protocol-Version": "2025-11-25",
               "Accept": "application/json, text/event-stream"}  # fmt: skip
    try:
        answer = httpx.post(dev.url + "/mcp", json=body, headers=headers, timeout=30)
        if answer.status_code == 200:
            assert answer.json()["result"]["isError"] is False, answer.text
        return answer.status_code
    except httpx.TransportError:
        return None


def ledger(dev: DevProcess, caller: str) -> Counter[str]:
    outcomes: Counter[str] = Counter()
    cursor = None
    while True:
        params: dict[str, Any] = {"caller": caller, "limit": 1000}
        if cursor:
            params["cursor"] = cursor
        page = dev.api("GET", "/api/calls", params=params)
        assert page.status_code == 200, page.text
        outcomes.update(entry["outcome"] for entry in page.json()["calls"])
        cursor = page.json()["next_cursor"]
        if cursor is None:
            return outcomes


@pytest.mark.slow
def test_no_answered_call_or_refusal_is_missing_from_the_ledger_after_a_kill_9(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    dev = start_dev(state)
    answered: Counter[int] = Counter()
    lock = threading.Lock()
    try:
        code = "import json, sys\nprint(json.load(sys.stdin)['n'] + 1)\n"
        tool = {
            "name": "add_one",
            "description": "d",
            "language": "python",
            "code": code,
            "input_schema": {"type": "object", "properties": {"n": {"type": "integer"}}},
        }
        assert dev.api("POST", "/api/tools", json=tool).status_code == 201
        made = dev.api("POST", "/api/keys", json={"name": "burst",
                                                  "quota": {"calls_per_minute": 60}})  # fmt: skip
        assert made.status_code == 201, made.text
        key = made.json()["key"]

        def caller(first: int) -> None:
            for index in range(first, first + CALLS_EACH):
                status = call(dev, key, index)
                if status is None:
                    return
                with lock:
                    answered[status] += 1
                    if sum(answered.values()) == CALLERS * CALLS_EACH // 2:
                        dev.process.kill()  # SIGKILL, mid-burst, calls in flight

        with ThreadPoolExecutor(CALLERS) as pool:
            list(pool.map(caller, range(0, CALLERS * CALLS_EACH, CALLS_EACH)))
    finally:
        dev.process.kill()
        dev.process.wait()
    assert answered[200], answered
    assert answered[429], answered  # the burst hit the quota before the kill
    dev = start_dev(state)
    try:
        recorded = ledger(dev, "key:burst")
    finally:
        dev.process.kill()
        dev.process.wait()
    assert recorded["ok"] >= answered[200], (recorded, answered)
    assert recorded["refused"] >= answered[429], (recorded, answered)
