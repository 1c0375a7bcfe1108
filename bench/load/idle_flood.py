"""A ping from a fresh connection while ~20,000 idle connections arrive at `kiln dev`.

Run: python -m bench.load.idle_flood [--flood 19800] [--pings 20]

Starts `kiln dev`, times `--pings` pings (each on a new connection) at rest: the baseline.
Then opens `--flood` connections at once that never send a byte (non-blocking connects, as an
attacker's event loop does), this process's descriptor limit raised to its hard limit, and
times pings on fresh connections while they arrive and after. Prints p50 and the slowest ping
of each phase, their ratio to the baseline, the server's connections held at the end, and the
load average. Issue 26 measured a ping held 19.7 s; the test that the ping is answered and the
excess shed is tests/functional/local/test_idle_flood.py.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import socket
import statistics
import tempfile
import threading
import time
from pathlib import Path

import httpx

from tests.support.devserver import start_dev, stop


def ping_s(url: str) -> float:
    """Seconds to a ping's answer on a new connection (inf if none within 120 s)."""
    started = time.monotonic()
    try:
        httpx.post(url + "/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
                   headers={"MCP-Protocol-Version": "2025-11-25"},
                   timeout=120).raise_for_status()  # fmt: skip
    except httpx.HTTPError:
        return float("inf")
    return time.monotonic() - started


def flood(port: int, count: int, into: list[socket.socket]) -> None:
    for _ in range(count):
        sock = socket.socket()
        sock.setblocking(False)
        sock.connect_ex(("127.0.0.1", port))
        into.append(sock)


def line(name: str, times: list[float], base: float) -> str:
    ordered = sorted(times)
    p50, p90, worst = statistics.median(ordered), ordered[int(len(ordered) * 0.9)], ordered[-1]
    over = sum(1 for t in ordered if t > 1)
    return (f"{name:<13} n={len(times):<4} p50 {p50 * 1000:8.1f} ms ({p50 / base:5.1f}x)"
            f"  p90 {p90 * 1000:8.1f} ms ({p90 / base:6.1f}x)"
            f"  slowest {worst * 1000:8.1f} ms ({worst / base:6.1f}x)"
            f"  over 1 s: {over}")  # fmt: skip


def held(pid: int) -> int:
    """Sockets `pid` holds open (one closed while they are listed is not counted)."""
    count = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(FileNotFoundError):
            count += "socket:" in os.readlink(fd)
    return count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--flood", type=int, default=19_800)
    parser.add_argument("--pings", type=int, default=20)
    args = parser.parse_args()
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    top = hard if hard != resource.RLIM_INFINITY else args.flood + 200
    resource.setrlimit(resource.RLIMIT_NOFILE, (top, hard))
    count = min(args.flood, top - 200)
    print(f"descriptor limit {top}: flood of {count}; load {os.getloadavg()}", flush=True)
    port = _free_port()
    dev = start_dev(Path(tempfile.mkdtemp(prefix="idle-flood-")) / ".kiln", port)
    try:
        rest = [ping_s(dev.url) for _ in range(args.pings)]
        socks: list[socket.socket] = []
        attacker = threading.Thread(target=flood, args=(port, count, socks))
        started = time.monotonic()
        attacker.start()
        during = []
        while attacker.is_alive() or not during:
            during.append(ping_s(dev.url))
        attacker.join()
        opened_s = time.monotonic() - started
        after = [ping_s(dev.url) for _ in range(args.pings)]
        base = statistics.median(rest)
        print(f"flood of {len(socks)} started in {opened_s:.1f} s; load {os.getloadavg()}")
        for name, times in (("at rest", rest), ("during flood", during), ("after flood", after)):
            print(line(name, times, base))
        print(f"sockets the server holds after the flood: {held(dev.process.pid)}")
        for sock in socks:
            sock.close()
    finally:
        stop(dev.process)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


if __name__ == "__main__":
    main()
