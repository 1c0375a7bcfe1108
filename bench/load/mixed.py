"""A mixed REST / MCP / tasks / studio / view-path load on `kiln dev`: 503s, latency, ledger.

Run: python -m bench.load.mixed [--requests 25000] [--rate 22]
                                                      [--half-requests 6000]

Starts `kiln dev` (a real child process with its emulator), adds two tools (a plain one and a
task tool), a key and a published view, then sends requests at a fixed rate (open loop: a
request is sent at its time whether or not earlier ones were answered) from a pool of
threads, drawn in a fixed rotation from the mix a studio and a few agents make: REST reads
(tools, a tool, keys, views, bundles, calls, totals), `tools/call` on /mcp and on the view's
path, task creations and `tasks/get`, the studio's page, and view writes (PUT and DELETE).
Then it waits for the tasks to end and counts the ledger: every answered `tools/call` and
every task must have its entry. The same is run at half the rate (on a fresh server) and
both are printed side by side, with the CPU the server's process tree (kiln dev, its
emulator, the runner) used per request, which the machine's load moves far less than the
latencies. Goal at the full rate (20+/s, >= 25,000 requests): 0 answers 503, p99 under 1 s,
the ledger complete.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import socket
import statistics
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from tests.support.devserver import AUTHOR_KEY, DevProcess, start_dev, stop

MODERN = "2026-07-28"
TASKS = "io.modelcontextprotocol/tasks"
PLAIN = "import json, sys\nprint(json.load(sys.stdin).get('n', 0) + 1)\n"
SLOW = "import json, sys, time\ntime.sleep(0.3)\nprint('done')\n"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Load:
    """One server under the mix; counts every answer."""

    def __init__(self, dev: DevProcess, key: str) -> None:
        self.dev = dev
        self.key = key
        self.http = httpx.Client(timeout=60, limits=httpx.Limits(max_connections=64))
        self.lock = threading.Lock()
        self.statuses: Counter[int] = Counter()
        self.by_kind: dict[str, list[float]] = {}
        self.latencies: list[float] = []
        self.calls_answered = 0  # tools/call with a result (plain) or a task created
        self.tasks: list[str] = []
        self.views = itertools.count()

    def mcp(self, path: str, method: str, params: dict[str, Any], name: str = "") -> Any:
        meta = {"io.modelcontextprotocol/protocolVersion": MODERN,
                "io.modelcontextprotocol/clientCapabilities": {"extensions": {TASKS: {}}},
                "io.modelcontextprotocol/clientInfo": {"name": "bench"}}  # fmt: skip
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": {**params, "_meta": meta}}
        headers = {"Authorization": f"Bearer {self.key}", "MCP-Protocol-Version": MODERN,
                   "Mcp-Method": method,
                   "Accept": "application/json, text/event-stream"}  # fmt: skip
        if name:
            headers["Mcp-Name"] = name
        return self.http.post(self.dev.url + path, json=body, headers=headers)

    def rest(self, method: str, path: str, **kw: Any) -> Any:
        headers = {"Authorization": f"Bearer {AUTHOR_KEY}"}
        return self.http.request(method, self.dev.url + path, headers=headers, **kw)

    def one(self, kind: str) -> None:
        began = time.perf_counter()
        try:
            answer = self.send(kind)
            status = answer.status_code
        except httpx.HTTPError:
            status = 0  # no answer at all
            answer = None
        took = time.perf_counter() - began
        with self.lock:
            self.statuses[status] += 1
            self.latencies.append(took)
            self.by_kind.setdefault(kind, []).append(took)
            if answer is not None and status == 200 and kind in ("call", "view_call", "task"):
                result = answer.json().get("result", {})
                if kind == "task" and "taskId" in result:
                    self.tasks.append(result["taskId"])
                    self.calls_answered += 1
                elif kind != "task" and "content" in result:
                    self.calls_answered += 1

    def send(self, kind: str) -> Any:
        if kind.startswith("GET "):
            return self.rest("GET", kind[4:])
        if kind == "call":
            return self.mcp("/mcp", "tools/call", {"name": "plain", "arguments": {"n": 1}},
                            "plain")  # fmt: skip
        if kind == "view_call":
            return self.mcp("/mcp/v/pub", "tools/call", {"name": "plain", "arguments": {}},
                            "plain")  # fmt: skip
        if kind == "task":
            return self.mcp("/mcp", "tools/call", {"name": "slow", "arguments": {}}, "slow")
        if kind == "task_get":
            with self.lock:
                task = self.tasks[-1] if self.tasks else None
            if task is None:
                return self.rest("GET", "/api/health")
            return self.mcp("/mcp", "tasks/get", {"taskId": task}, task)
        if kind == "studio":
            return self.http.get(self.dev.url + "/studio/")
        number = next(self.views)
        if kind == "view_put":
            body = {"name": f"tmp{number % 50}", "tools": ["plain"]}
            return self.rest("PUT", f"/api/views/tmp{number % 50}", json=body)
        return self.rest("DELETE", f"/api/views/tmp{(number + 25) % 50}")


MIX = (
    ["GET /api/tools", "GET /api/tools/plain", "GET /api/keys", "GET /api/views",
     "GET /api/bundles", "GET /api/calls?limit=20", "GET /api/calls/totals",
     "GET /api/calls?limit=20&tool=slow"]
    + ["call"] * 4 + ["view_call"] * 2 + ["task", "task_get", "task_get", "studio"]
    + ["view_put", "view_delete"]
)  # fmt: skip


def prepare(dev: DevProcess) -> str:
    for name, code, extra in (("plain", PLAIN, {}), ("slow", SLOW, {"task": "optional"})):
        tool = {"name": name, "description": "bench", "language": "python", "code": code,
                "input_schema": {"type": "object"}, **extra}  # fmt: skip
        made = dev.api("POST", "/api/tools", json=tool)
        assert made.status_code == 201, made.text
    view = {"name": "pub", "tools": ["plain"], "published": True}
    assert dev.api("POST", "/api/views", json=view).status_code == 201
    made = dev.api("POST", "/api/keys", json={"name": "bench"})
    assert made.status_code == 201, made.text
    return str(made.json()["key"])


def tree_cpu_s(root: int) -> float:
    """CPU seconds used by `root` and every live process under it (with their reaped children):
    kiln dev, its emulator, the runner's helper and standbys. Unlike latency, this barely
    depends on how busy the rest of the machine is."""
    return sum(cpu_by_process(root).values())


def cpu_by_process(root: int) -> dict[str, float]:
    """`tree_cpu_s` split: kiln dev itself, its emulator (and compactions), the rest (tool
    runs: the runner's helper, standbys and the processes they ran)."""
    tick = os.sysconf("SC_CLK_TCK")
    children: dict[int, list[int]] = {}
    used: dict[int, float] = {}
    for entry in Path("/proc").iterdir():
        try:
            raw = (entry / "stat").read_text() if entry.name.isdigit() else ""
        except OSError:
            continue
        if raw:
            fields = raw[raw.rindex(")") + 2 :].split()  # utime stime cutime cstime: 11..14
            children.setdefault(int(fields[1]), []).append(int(entry.name))
            used[int(entry.name)] = sum(int(value) for value in fields[11:15]) / tick
    own = used.get(root, 0.0)  # with its reaped children (runs that ended)
    emulators = [pid for pid in children.get(root, []) if b"kiln.local.emulator" in _cmdline(pid)]
    split = {"kiln dev": own, "emulator": 0.0, "runs": 0.0}
    todo = [(pid, "emulator" if pid in emulators else "runs") for pid in children.get(root, [])]
    while todo:
        pid, part = todo.pop()
        split[part] += used.get(pid, 0.0)
        todo.extend((child, part) for child in children.get(pid, []))
    return split


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def run(requests: int, rate: float, workers: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="kiln-bench-mixed-") as tmp:
        dev = start_dev(Path(tmp) / "state", free_port(), timeout_s=180)
        try:
            load = Load(dev, prepare(dev))
            cpu_before = cpu_by_process(dev.process.pid)
            began = time.monotonic()
            with ThreadPoolExecutor(workers) as pool:
                for index in range(requests):
                    delay = began + index / rate - time.monotonic()
                    if delay > 0:
                        time.sleep(delay)
                    pool.submit(load.one, MIX[index % len(MIX)])
            elapsed = time.monotonic() - began
            cpu_after = cpu_by_process(dev.process.pid)
            cpu_s = {part: cpu_after[part] - cpu_before[part] for part in cpu_after}
            recorded = ledger_count(load)
        finally:
            stop(dev.process)
    ordered = sorted(load.latencies)
    return {
        "requests": requests, "rate": requests / elapsed, "statuses": dict(load.statuses),
        "p50": statistics.median(ordered), "p99": ordered[int(len(ordered) * 0.99) - 1],
        "max": ordered[-1], "over_1s": sum(1 for t in ordered if t > 1),
        "server_cpu_ms_per_request": 1000 * sum(cpu_s.values()) / requests,
        "cpu_ms_per_request_by_process": {part: round(1000 * s / requests, 2)
                                          for part, s in cpu_s.items()},
        "answered_calls": load.calls_answered, "ledgered": recorded,
        "per_kind_p50_p99": {kind: (round(statistics.median(times), 3),
                                    round(sorted(times)[int(len(times) * 0.99) - 1], 3))
                             for kind, times in load.by_kind.items()},
    }  # fmt: skip


def ledger_count(load: Load) -> int:
    """Entries of the bench key, once its tasks have ended (a task is ledgered at its end)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        total = 0
        cursor = None
        while True:
            params: dict[str, Any] = {"caller": "key:bench", "limit": 1000}
            if cursor:
                params["cursor"] = cursor
            answer = load.rest("GET", "/api/calls", params=params)
            if answer.status_code != 200:  # counted again on the next round
                print(f"ledger query: {answer.status_code} {answer.text[:200]}", flush=True)
                total = -1
                break
            page = answer.json()
            total += len(page["calls"])
            cursor = page["next_cursor"]
            if cursor is None:
                break
        if total >= load.calls_answered:
            return total
        time.sleep(2)
    return total


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=25_000)
    parser.add_argument("--rate", type=float, default=22.0)
    parser.add_argument("--half-requests", type=int, default=6_000)
    parser.add_argument("--workers", type=int, default=48)
    args = parser.parse_args()
    results = {}
    for label, requests, rate in (("full", args.requests, args.rate),
                                  ("half", args.half_requests, args.rate / 2)):  # fmt: skip
        load_before = Path("/proc/loadavg").read_text().split()[0]
        results[label] = run(requests, rate, args.workers)
        results[label]["load"] = f"{load_before} -> {Path('/proc/loadavg').read_text().split()[0]}"
        print(label, json.dumps(results[label]), flush=True)
    print(f"\n{'':16} {'half rate':>14} {'full rate':>14}")
    for field in ("requests", "rate", "p50", "p99", "max", "over_1s", "answered_calls",
                  "ledgered", "server_cpu_ms_per_request", "load"):  # fmt: skip
        half, full = results["half"][field], results["full"][field]
        cells = [f"{v:.3f}" if isinstance(v, float) else str(v) for v in (half, full)]
        print(f"{field:16} {cells[0]:>14} {cells[1]:>14}")
    for label in ("half", "full"):
        print(f"{label} statuses: {results[label]['statuses']}")
        print(f"{label} CPU ms/request: {results[label]['cpu_ms_per_request_by_process']}")
        print(f"{label} p50/p99 by kind: {results[label]['per_kind_p50_p99']}")
    full = results["full"]
    ok = (full["statuses"].get(503, 0) == 0 and full["p99"] < 1.0
          and full["ledgered"] >= full["answered_calls"])  # fmt: skip
    print("goal (0 x 503, p99 < 1 s, ledger complete):", "met" if ok else "NOT met")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
