"""A tool cannot starve every other call of run slots: attacks on `kiln dev`, run as root
and as an unprivileged user.

The tool calls Kiln's own /mcp to call itself (6 deep, and 4 wide x 3 deep). Under the
runs' TCP fence it cannot reach kiln dev's port at all, even listed in KILN_RUN_TCP_PORTS
(kiln dev may serve on a common port: 8000, 8080); with every port opened to runs
(`KILN_RUN_TCP_PORTS=all`, root: a uid per run) its calls from inside its runs are refused
at once once its share of the slots is taken, instead of waiting for themselves. Either
way its own call answers long before its deadline, and an unrelated caller's call is not
held up behind it.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import httpx
import pytest

from support.devserver import DevServer, kiln_dev_as, on_a_free_port

RECURSE = r"""
import json, sys, urllib.request
from concurrent.futures import ThreadPoolExecutor
args = json.load(sys.stdin)
if args["depth"] <= 0:
    print("bottom")
    sys.exit()
inner = dict(args, depth=args["depth"] - 1)
body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                   "params": {"name": "recurse", "arguments": inner}}).encode()
def one(_):
    request = urllib.request.Request(args["url"], data=body, headers={
        "Content-Type": "application/json", "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2025-11-25"})
    try:
        with urllib.request.urlopen(request, timeout=120) as answer:
            return json.load(answer)["result"]["content"][0]["text"]
    except Exception as error:
        return f"{type(error).__name__}: {error}"
with ThreadPoolExecutor(args["width"]) as pool:
    print(json.dumps(list(pool.map(one, range(args["width"])))))
"""
TIMEOUT_S = (
    30  # the tool's own deadline (the most a plain tool may take): a deadlock lasts this long
)


SCHEMA = {"type": "object", "properties": {"depth": {"type": "integer"},
          "width": {"type": "integer"}, "url": {"type": "string"}}}  # fmt: skip


def tool(name: str, code: str) -> dict[str, Any]:
    return {"name": name, "description": f"{name}.", "language": "python", "code": code,
            "timeout_seconds": TIMEOUT_S, "input_schema": SCHEMA}  # fmt: skip


@pytest.fixture(scope="module", params=["root", "root-all-ports", "unprivileged"])
def dev(request: pytest.FixtureRequest) -> Iterator[tuple[str, DevServer]]:
    base = Path(tempfile.mkdtemp(prefix="kiln-run-slots-"))
    uid_model = request.param.removesuffix("-all-ports")

    # Its own port listed for runs, as when kiln dev serves on a common one (8000, 8080):
    # kiln dev leaves it out whatever the list says, as it does the emulator's.
    def start(port: int) -> AbstractContextManager[DevServer]:
        ports = "all" if request.param.endswith("all-ports") else f"80,443,{port}"
        env = {"KILN_RUN_TCP_PORTS": ports}
        return kiln_dev_as(uid_model, base, "--no-examples", port=port, env=env)

    try:
        with on_a_free_port(start) as server:
            for name, code in (("recurse", RECURSE), ("hello", "print('hello')\n")):
                created = server.api("POST", "/api/tools", json=tool(name, code))
                assert created.status_code == 201, created.text
            yield request.param, server
    finally:
        shutil.rmtree(base, ignore_errors=True)


def call(url: str, name: str, arguments: dict[str, Any]) -> tuple[float, dict[str, Any]]:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": name, "arguments": arguments}}  # fmt: skip
    headers = {"Accept": "application/json, text/event-stream",
               "MCP-Protocol-Version": "2025-11-25"}  # fmt: skip
    started = time.monotonic()
    answer = httpx.post(url + "/mcp", json=body, headers=headers, timeout=TIMEOUT_S * 2)
    assert answer.status_code == 200, answer.text
    return time.monotonic() - started, answer.json()["result"]


@pytest.mark.parametrize(("depth", "width"), [(6, 1), (3, 4)], ids=["6-deep", "4-wide-3-deep"])
def test_a_tool_calling_itself_through_kiln_neither_deadlocks_nor_starves_other_callers(
    dev: tuple[str, DevServer], depth: int, width: int
) -> None:
    mode, server = dev
    top: list[tuple[float, dict[str, Any]]] = []
    arguments = {"depth": depth, "width": width, "url": server.url + "/mcp"}
    attack = threading.Thread(target=lambda: top.append(call(server.url, "recurse", arguments)))
    attack.start()
    probes: list[float] = []
    try:
        while attack.is_alive() or not probes:  # an unrelated caller, all through the attack
            other_s, other = call(server.url, "hello", {})
            assert other["content"][0]["text"].strip() == "hello", other
            probes.append(other_s)
    finally:
        attack.join(timeout=TIMEOUT_S * 2)
    top_s, result = top[0]
    text = json.dumps(result)
    # Not its deadline: refused at the port (fenced), or at once for a slot (all ports).
    assert top_s < TIMEOUT_S / 3, (top_s, text)
    assert max(probes) < TIMEOUT_S / 3, (probes, text)
    if mode == "root-all-ports":
        assert "refused at once: all 4 run slots are taken" in text, text
    else:  # it could not even reach kiln dev's port
        assert "[Errno 13] Permission denied" in text, text


SPAWNER = r"""
import json, sys, urllib.request
args = json.load(sys.stdin)
body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                   "params": {"name": "spawner", "arguments": args, "task": {"ttl": 60000}}})
outcomes = []
for _ in range(2):  # two more of itself, each of which starts two more ...
    request = urllib.request.Request(args["url"], data=body.encode(), headers={
        "Content-Type": "application/json", "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2025-11-25"})
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            outcomes.append(json.load(answer).get("result", {}).get("task", {}).get("status"))
    except Exception as error:
        outcomes.append(f"{type(error).__name__}: {error}")
print(json.dumps(outcomes))
"""


def test_a_task_tool_that_starts_two_more_of_itself_per_run_starts_none(
    dev: tuple[str, DevServer],
) -> None:
    mode, server = dev
    if mode == "root-all-ports":
        pytest.skip("every port open to runs: task creations from a run are not refused")
    spawner = {**tool("spawner", SPAWNER), "task": "optional"}
    created = server.api("POST", "/api/tools", json=spawner)
    assert created.status_code == 201, created.text
    _, result = call(server.url, "spawner", {"url": server.url + "/mcp"})
    outcomes = json.loads(result["content"][0]["text"])
    assert len(outcomes) == 2, result
    for outcome in outcomes:  # not "working": no task of itself was started
        assert "[Errno 13] Permission denied" in outcome, outcomes
