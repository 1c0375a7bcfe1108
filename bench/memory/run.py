"""Memory under a long run: RSS of `kiln dev` after 100,000 mixed requests against its RSS
after 1,000 (goal: within 1.2x).

Run: python -m bench.memory.run [--requests 100000] [--workers 8]

Starts `kiln dev` as a real process (as bench/runner/http_call.py does) with a trivial Python
tool, then sends a mix over kept-alive HTTP from a few concurrent clients: tools/list on both
wires, initialize, tools/call (the tool, and an unknown name), a malformed body, REST reads of
the catalog. Prints the server process's RSS, and that of its whole process tree (the
emulator, when it runs in a child), at checkpoints, and the ratio of the last to the first.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench.runner.http_call import HEADERS, kiln_dev, write_tools

MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "1"},
}
LEGACY = {**HEADERS, "MCP-Protocol-Version": "2025-11-25"}
MODERN = {**HEADERS, "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/list"}


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def tree(pid: int) -> list[int]:
    """`pid` and its descendants (tool runs come and go; the emulator child stays)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(parent, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(children.get(current, []))
    return found


def tree_rss_kib(pid: int) -> int:
    """The tree's RSS, without a journal compaction that happens to be running: that child
    holds a second copy of the emulator's state for as long as it runs (`compaction_kib`)."""
    total = 0
    for member in tree(pid):
        try:
            if not _compacting(member):
                total += rss_kib(member)
        except OSError:
            continue  # a tool run that just ended
    return total


def compaction_kib(pid: int) -> int:
    total = 0
    for member in tree(pid):
        with contextlib.suppress(OSError):
            if _compacting(member):
                total += rss_kib(member)
    return total


def _compacting(pid: int) -> bool:
    return b"kiln.local.emulator.compactor" in Path(f"/proc/{pid}/cmdline").read_bytes()


def requests() -> itertools.cycle[tuple[str, str, dict[str, str], Any]]:
    """The mix, one entry per request kind (tools/call of the tool is 1 in 10)."""
    rpc: list[tuple[str, str, dict[str, str], Any]] = [
        ("POST", "/mcp", LEGACY, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
        (
            "POST",
            "/mcp",
            MODERN,
            {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {"_meta": MODERN_META}},
        ),
        ("POST", "/mcp", LEGACY, {"jsonrpc": "2.0", "id": 3, "method": "tools/list"}),
        (
            "POST",
            "/mcp",
            LEGACY,
            {
                "jsonrpc": "2.0",
                "id": 4,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {},
                    "clientInfo": {"name": "bench", "version": "1"},
                },
            },
        ),
        (
            "POST",
            "/mcp",
            LEGACY,
            {
                "jsonrpc": "2.0",
                "id": 5,
                "method": "tools/call",
                "params": {"name": "bench_py", "arguments": {}},
            },
        ),
        (
            "POST",
            "/mcp",
            LEGACY,
            {
                "jsonrpc": "2.0",
                "id": 6,
                "method": "tools/call",
                "params": {"name": "no_such_tool", "arguments": {}},
            },
        ),
        ("POST", "/mcp", LEGACY, "{not json"),
        ("GET", "/api/tools", {"Authorization": "Bearer bench-key"}, None),
        ("GET", "/api/health", {}, None),
        ("POST", "/mcp", LEGACY, {"jsonrpc": "2.0", "id": 7, "method": "ping"}),
    ]
    return itertools.cycle(rpc)


async def drive(url: str, count: int, workers: int, mix: Any) -> int:
    """Send `count` requests from `workers` concurrent clients; the number that failed."""
    failures = 0
    remaining = count

    async def worker(client: httpx.AsyncClient) -> None:
        nonlocal failures, remaining
        while remaining > 0:
            remaining -= 1
            method, path, headers, body = next(mix)
            content = body if isinstance(body, str) else None
            payload = None if isinstance(body, str) else body
            answer = await client.request(
                method, path, headers=headers, json=payload, content=content
            )
            if answer.status_code >= 500:
                failures += 1

    limits = httpx.Limits(max_connections=workers, max_keepalive_connections=workers)
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as client:
        await asyncio.gather(*(worker(client) for _ in range(workers)))
    return failures


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--baseline", type=int, default=1_000)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--checkpoints", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kiln-bench-mem-") as tmp:
        work = Path(tmp)
        write_tools(work / "tools")
        with kiln_dev(work) as url:
            pid = dev_pid(work)
            mix = requests()
            started = time.perf_counter()
            failed = asyncio.run(drive(url, args.baseline, args.workers, mix))
            base, base_tree = rss_kib(pid), tree_rss_kib(pid)
            print(f"after {args.baseline:>7,} requests: server {base / 1024:6.1f} MiB,"
                  f" tree {base_tree / 1024:6.1f} MiB")  # fmt: skip
            done = args.baseline
            step = max(1, (args.requests - args.baseline) // args.checkpoints)
            while done < args.requests:
                batch = min(step, args.requests - done)
                failed += asyncio.run(drive(url, batch, args.workers, mix))
                done += batch
                now, now_tree = rss_kib(pid), tree_rss_kib(pid)
                rate = done / (time.perf_counter() - started)
                line = f"after {done:>7,} requests: server {now / 1024:6.1f} MiB,"
                line += f" tree {now_tree / 1024:6.1f} MiB ({rate:.0f} req/s)"
                if compacting := compaction_kib(pid):
                    line += f"; a compaction child: {compacting / 1024:.1f} MiB more"
                print(line, flush=True)
    print(f"load {os.getloadavg()[0]:.1f}; {failed} answers were 5xx")
    print(f"RSS ratio after {done:,} / after {args.baseline:,}: server {now / base:.2f}x,"
          f" tree {now_tree / base_tree:.2f}x (goal <= 1.20x)")  # fmt: skip
    return 0


def dev_pid(work: Path) -> int:
    """The `kiln dev` process: the one whose command line names this run's state dir."""
    marker = str(work / "state").encode()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if b"kiln.cli\x00dev" in cmdline and marker in cmdline:
                return int(entry.name)
    raise SystemExit("kiln dev's process not found")


if __name__ == "__main__":
    sys.exit(main())
