"""tools/list (100 tools) and server/discover: `kiln dev` against the SDK reference server.

Both servers run on this machine in the same run and are driven by the same client (wrk with
the yardstick's wrk-post.lua when installed, else a small asyncio client), one after the
other per scenario. Prints requests/s and p50/p99 latency for each, then kiln/reference
ratios. Goal (issue 3): at least 2x the reference's throughput with a lower p99.

    python -m bench.protocol.run [--duration 8] [--connections 4] [--client wrk|python]

The reference server (the yardsticks' `ref_server.py`, from ../shared/tools or
KILN_YARDSTICKS) runs on REF_PYTHON if set, else in the SDK's own venv, which
`bench.protocol.sdk` makes on first use.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from bench.protocol import sdk

ROOT = Path(__file__).resolve().parents[2]
TOOLS_DIR = Path(os.environ.get("KILN_YARDSTICKS") or ROOT.parent / "shared" / "tools")
TOOL_COUNT = 100
META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "1"},
}


@dataclass(frozen=True)
class Scenario:
    name: str
    body: dict[str, object]
    headers: dict[str, str]


SCENARIOS = [
    Scenario(
        "tools/list (2025-11-25)",
        {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}},
        {"mcp-protocol-version": "2025-11-25"},
    ),
    Scenario(
        "tools/list (2026-07-28)",
        {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": META}},
        {"mcp-protocol-version": "2026-07-28", "mcp-method": "tools/list"},
    ),
    Scenario(
        "server/discover",
        {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": META}},
        {"mcp-protocol-version": "2026-07-28", "mcp-method": "server/discover"},
    ),
]


@dataclass(frozen=True)
class Result:
    rps: float
    p50_ms: float
    p99_ms: float
    failures: int


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def write_tools(root: Path) -> None:
    """100 filler tools shaped like the reference server's --extra-tools ones."""
    schema = {
        "type": "object",
        "properties": {"net": {"type": "number", "minimum": 0}, "note": {"type": "string"}},
        "required": ["net"],
    }
    code = "import json, sys\nprint(json.dumps(json.load(sys.stdin)))\n"
    for i in range(TOOL_COUNT):
        folder = root / f"filler_{i:04d}"
        folder.mkdir(parents=True)
        manifest = {
            "description": f"Filler tool {i} for list benchmarks.",
            "language": "python",
            "input_schema": schema,
        }
        (folder / "tool.json").write_text(json.dumps(manifest))
        (folder / "main.py").write_text(code)


def wait_until_serving(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 120
    ping = {"jsonrpc": "2.0", "id": 0, "method": "tools/list", "params": {}}
    headers = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
    while time.monotonic() < deadline:
        if process.poll() is not None:
            sys.exit(f"server exited early:\n{log.read_text()[-3000:]}")
        try:
            if httpx.post(url, json=ping, headers=headers, timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    sys.exit(f"server at {url} did not start within 120 s")


@contextmanager
def running(command: list[str], url: str, log: Path) -> Iterator[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "KILN_"))}
    with log.open("w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        wait_until_serving(url, process, log)
        yield url
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def count_tools(url: str) -> int:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    headers = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
    result = httpx.post(url, json=body, headers=headers, timeout=10).json()["result"]
    return len(result["tools"])


def run_wrk(url: str, scenario: Scenario, duration: int, connections: int) -> Result:
    env = {
        **os.environ,
        "BODY": json.dumps(scenario.body),
        "HDRS": ";".join(f"{k}={v}" for k, v in scenario.headers.items()),
    }
    command = [
        "wrk",
        "-t1",
        f"-c{connections}",
        f"-d{duration}s",
        "--latency",
        "-s",
        str(TOOLS_DIR / "wrk-post.lua"),
        url,
    ]
    output = subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout
    match = re.search(
        r"RESULT rps=([\d.]+) p50_ms=([\d.]+) p99_ms=([\d.]+) non2xx=(\d+) errors=(\d+)", output
    )
    if match is None:
        sys.exit(f"wrk printed no RESULT line:\n{output}")
    rps, p50, p99, non2xx, errors = match.groups()
    return Result(float(rps), float(p50), float(p99), int(non2xx) + int(errors))


async def _python_client(url: str, scenario: Scenario, duration: int, connections: int) -> Result:
    headers = {
        "content-type": "application/json",
        "accept": "application/json, text/event-stream",
        **scenario.headers,
    }
    payload = json.dumps(scenario.body).encode()
    latencies: list[float] = []
    failures = 0
    deadline = time.perf_counter() + duration

    async def worker(client: httpx.AsyncClient) -> None:
        nonlocal failures
        while time.perf_counter() < deadline:
            start = time.perf_counter()
            response = await client.post(url, content=payload, headers=headers)
            latencies.append(time.perf_counter() - start)
            failures += response.status_code != 200

    limits = httpx.Limits(max_connections=connections)
    async with httpx.AsyncClient(limits=limits, timeout=30) as client:
        began = time.perf_counter()
        await asyncio.gather(*(worker(client) for _ in range(connections)))
        elapsed = time.perf_counter() - began
    cuts = statistics.quantiles(latencies, n=100)
    return Result(len(latencies) / elapsed, cuts[49] * 1000, cuts[98] * 1000, failures)


def measure(client: str, url: str, scenario: Scenario, duration: int, connections: int) -> Result:
    if client == "wrk":
        run_wrk(url, scenario, 1, connections)  # warm-up: caches, JIT-free but lazy imports
        return run_wrk(url, scenario, duration, connections)
    asyncio.run(_python_client(url, scenario, 1, connections))
    return asyncio.run(_python_client(url, scenario, duration, connections))


def interleaved(
    client: str, urls: dict[str, str], scenario: Scenario, args: argparse.Namespace
) -> dict[str, Result]:
    """Each server in turn for `--slices` slices of duration/slices seconds, so that a change in
    the machine's load during the run falls on every server alike; requests/s is the mean over
    slices, p50 and p99 the median of the slices'."""
    seconds = max(1, round(args.duration / args.slices))
    for url in urls.values():
        measure(client, url, scenario, 1, args.connections)  # warm-up, not counted
    slices: dict[str, list[Result]] = {label: [] for label in urls}
    for _ in range(args.slices):
        for label, url in urls.items():
            if client == "wrk":
                slices[label].append(run_wrk(url, scenario, seconds, args.connections))
            else:
                slices[label].append(
                    asyncio.run(_python_client(url, scenario, seconds, args.connections))
                )
    return {
        label: Result(
            statistics.mean(r.rps for r in results),
            statistics.median(r.p50_ms for r in results),
            statistics.median(r.p99_ms for r in results),
            sum(r.failures for r in results),
        )
        for label, results in slices.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=int, default=8)
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--client", choices=["wrk", "python"], default=None)
    parser.add_argument("--slices", type=int, default=4, help="turns each server gets")
    args = parser.parse_args()
    client = args.client or ("wrk" if shutil.which("wrk") else "python")
    if not (TOOLS_DIR / "ref_server.py").exists():
        sys.exit(f"no ref_server.py in {TOOLS_DIR}: set KILN_YARDSTICKS to the yardsticks' folder")
    ref_python = os.environ.get("REF_PYTHON") or str(sdk.python())

    with tempfile.TemporaryDirectory(prefix="kiln-bench-") as tmp_name:
        tmp = Path(tmp_name)
        write_tools(tmp / "tools")
        kiln_port, ref_port, bare_port = free_port(), free_port(), free_port()
        kiln_cmd = [
            sys.executable, "-m", "kiln.cli", "dev", "--no-examples",
            "--tools", str(tmp / "tools"), "--port", str(kiln_port),
            "--state-dir", str(tmp / ".kiln"), "--author-key", "bench-author-key",
        ]  # fmt: skip
        ref_cmd = [
            ref_python, str(TOOLS_DIR / "ref_server.py"),
            "--port", str(ref_port), "--extra-tools", str(TOOL_COUNT - 3),
        ]  # fmt: skip
        bare_cmd = [sys.executable, "-m", "bench.protocol.harness", str(bare_port)]
        urls = {
            "kiln dev": f"http://127.0.0.1:{kiln_port}/mcp",
            "reference": f"http://127.0.0.1:{ref_port}/mcp",
            "protocol": f"http://127.0.0.1:{bare_port}/mcp",
        }
        with (
            running(kiln_cmd, urls["kiln dev"], tmp / "kiln.log"),
            running(ref_cmd, urls["reference"], tmp / "ref.log"),
            running(bare_cmd, urls["protocol"], tmp / "bare.log"),
        ):
            print(
                f"client: {client}, {args.connections} connections, {args.duration} s each in "
                f"{args.slices} interleaved slices, load {os.getloadavg()[0]:.1f}"
            )
            print("tools listed: " + ", ".join(f"{k} {count_tools(u)}" for k, u in urls.items()))
            print("(protocol = McpEndpoint alone: static backend, bare ASGI, no catalog read)")
            print(f"{'scenario':26} {'server':10} {'req/s':>9} {'p50 ms':>8} {'p99 ms':>8}")
            rows = []
            for scenario in SCENARIOS:
                results = interleaved(client, urls, scenario, args)
                for label, r in results.items():
                    flag = f"  ({r.failures} failed)" if r.failures else ""
                    print(
                        f"{scenario.name:26} {label:10} {r.rps:9.1f} {r.p50_ms:8.2f} "
                        f"{r.p99_ms:8.2f}{flag}"
                    )
                rows.append((scenario.name, results))
            print()
            print(
                f"{'scenario':26} {'server':10} {'throughput x':>13} {'p50 ratio':>10} "
                f"{'p99 ratio':>10}"
            )
            for name, results in rows:
                ref = results["reference"]
                for label in ("kiln dev", "protocol"):
                    r = results[label]
                    print(
                        f"{name:26} {label:10} {r.rps / ref.rps:13.2f} "
                        f"{r.p50_ms / ref.p50_ms:10.2f} {r.p99_ms / ref.p99_ms:10.2f}"
                    )
            print("(x and ratios against the reference; latency ratios < 1 favour kiln)")


if __name__ == "__main__":
    main()
