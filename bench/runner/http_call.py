"""End-to-end `tools/call` latency over HTTP, beside a bare interpreter start.

Run: PYTHONPATH=functions python bench/runner/http_call.py [--rounds N]

Starts `kiln dev` as a real process (embedded moto, uvicorn on a free loopback port) with
two trivial tools, one Python and one Node, then times MCP `tools/call` POSTs with a kept-alive
HTTP client, interleaved round by round with a bare start of the same interpreter
(`python -I -S -c pass`, `node -e 0`). Prints medians and ratios; the goals (issue 16) are
1.2x of bare for Python and 1.5x for Node. Also times `tools/list`, which runs no script, as
the floor the server adds to every call. Then `--save-rounds` rounds of: save a new
revision of each tool through the REST API, pause `--after-save` seconds, and time the first
call of each (a save prepares the tool's standby: kiln.serving.warming), beside bare starts.

Two servers run side by side: one as `kiln dev` starts by default, which keeps a prepared run
waiting for each recently called tool (KILN_RUN_STANDBY, see kiln/runner/standby.py), and one
with KILN_RUN_STANDBY=0, where every call prepares its run (directory, uid, mount namespace
or Landlock fence, fork, Node's start) on its own path: the first call of a tool pays that.
A standby is made in the background right after a call. Requests follow each other without
a pause (an idle pause makes this VM's next wake-up slow: 40 ms for a bare Python start after
0.1 s idle, 10 ms without), in an order where that background work can only slow what is
measured against the goals, never the baselines: the standby server's calls first (Python's
standby is made during the Node call), then the cold server's calls (during which Node's
standby is made), then the bare starts, on a quiet machine. `--settle S` pauses before each.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from kiln.runner.nodejs import find_node

HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
AUTHOR = {"Authorization": "Bearer bench-key"}
# The bare start gets the same kind of minimal environment a tool gets: a server environment
# can make a start much slower (NODE_EXTRA_CA_CERTS, say, makes Node parse a CA bundle first).
BARE_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
TOOLS = {
    "bench_py": ("main.py", "print('ok')\n"),
    "bench_node": ("main.js", "console.log('ok');\n"),
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write_tools(root: Path) -> None:
    for name, (script, code) in TOOLS.items():
        folder = root / name
        folder.mkdir(parents=True)
        (folder / script).write_text(code)
        manifest = {"description": f"Benchmark tool {name}: prints ok.", "input_schema": {}}
        (folder / "tool.json").write_text(json.dumps(manifest))


@contextmanager
def kiln_dev(work: Path, tools: Path | None = None, **extra_env: str) -> Iterator[str]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "KILN_"))}
    env.update(extra_env)
    work.mkdir(parents=True, exist_ok=True)
    log = (work / "dev.log").open("w")
    process = subprocess.Popen(
        [
            *(sys.executable, "-m", "kiln.cli", "dev", "--port", str(port), "--no-examples"),
            *("--state-dir", str(work / "state"), "--author-key", "bench-key"),
            *("--tools", str(tools or work / "tools")),
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        give_up = time.monotonic() + 180
        while True:
            if process.poll() is not None:
                raise SystemExit((work / "dev.log").read_text())
            try:
                if httpx.get(url + "/api/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > give_up:
                raise SystemExit("kiln dev did not start within 180 s")
            time.sleep(0.1)
        yield url
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def timed(fn: Callable[[], object]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def caller(client: httpx.Client) -> Callable[[str], Callable[[], object]]:
    ids = iter(range(1, 1_000_000))

    def call(name: str) -> Callable[[], object]:
        def once() -> None:
            body = {
                "jsonrpc": "2.0",
                "id": next(ids),
                "method": "tools/call",
                "params": {"name": name, "arguments": {}},
            }
            result = client.post("/mcp", json=body).json()["result"]
            assert not result["isError"], result
            assert result["content"][0]["text"] == "ok", result

        return once

    return call


def after_saves(
    client: httpx.Client, rounds: int, pause_s: float, bare: dict[str, Callable[[], object]]
) -> dict[str, list[float]]:
    """The first call of each tool right after a save of a new revision (each round saves
    both, waits `pause_s` as an author would between saving and calling, then calls each
    once), beside bare starts timed in the same rounds."""
    call = caller(client)
    samples: dict[str, list[float]] = {}
    for number in range(rounds):
        for name, (script, code) in TOOLS.items():
            comment = "#" if script.endswith(".py") else "//"
            body = {
                "name": name, "description": f"Benchmark tool {name}: prints ok.",
                "language": "python" if script.endswith(".py") else "node",
                "code": f"{code.rstrip()}  {comment} revision {number}\n", "input_schema": {},
            }  # fmt: skip
            tag = client.get(f"/api/tools/{name}", headers=AUTHOR).headers["etag"]
            saved = client.put(f"/api/tools/{name}", json=body, headers={**AUTHOR, "If-Match": tag})
            assert saved.status_code == 200, saved.text
        time.sleep(pause_s)
        # The bare starts first: the work a call leaves behind (its next standby, its ledger
        # entry's store write) must not slow the baseline it is compared with.
        for name, fn in bare.items():
            samples.setdefault(name, []).append(timed(fn))
        for name in TOOLS:
            samples.setdefault(f"first call after a save {name}", []).append(timed(call(name)))
    return samples


def main(rounds: int, settle_s: float, save_rounds: int, pause_s: float) -> None:
    node = str(find_node())
    with tempfile.TemporaryDirectory(prefix="kiln-bench-") as tmp:
        work = Path(tmp)
        write_tools(work / "tools")
        with (
            kiln_dev(work / "standby", work / "tools") as url,
            kiln_dev(work / "cold", work / "tools", KILN_RUN_STANDBY="0") as cold_url,
            httpx.Client(base_url=url, headers=HEADERS, timeout=60) as client,
            httpx.Client(base_url=cold_url, headers=HEADERS, timeout=60) as cold_client,
        ):
            call, cold_call = caller(client), caller(cold_client)

            def list_tools() -> None:
                body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
                assert client.post("/mcp", json=body).status_code == 200

            cases: dict[str, Callable[[], object]] = {
                "tools/list (no script)": list_tools,
                "tools/call python print": call("bench_py"),
                "tools/call node print": call("bench_node"),
                "  cold (no standby) python": cold_call("bench_py"),
                "  cold (no standby) node": cold_call("bench_node"),
                "bare python -I -S -c pass": lambda: subprocess.run(
                    [sys.executable, "-I", "-S", "-c", "pass"], check=True, env=BARE_ENV
                ),
                "bare node -e 0": lambda: subprocess.run(
                    [node, "-e", "0"], check=True, env=BARE_ENV
                ),
            }
            for _ in range(3):
                for fn in cases.values():
                    fn()
            samples: dict[str, list[float]] = {name: [] for name in cases}
            for _ in range(rounds):
                for name, fn in cases.items():
                    if settle_s:
                        time.sleep(settle_s)
                    samples[name].append(timed(fn))
            bare = {name: fn for name, fn in cases.items() if name.startswith("bare")}
            saves = after_saves(client, save_rounds, pause_s, bare)
    report(samples, f"HTTP end to end through `kiln dev`, {rounds} rounds")
    report(
        saves,
        f"\nThe first call after a save ({save_rounds} rounds, {pause_s} s after the save; "
        "goals 1.0x bare Python, 1.2x bare Node)",
    )
    print(f"load: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")


def report(samples: dict[str, list[float]], title: str) -> None:
    medians = {name: statistics.median(values) for name, values in samples.items()}
    print(title)
    print(f"  {'':28s} {'median':>9s} {'min':>8s}   ratio of medians (of minimums)")
    for name, median in medians.items():
        bare_name = "bare node -e 0" if "node" in name else "bare python -I -S -c pass"
        fastest, bare_fastest = min(samples[name]), min(samples[bare_name])
        ratio = f"{median / medians[bare_name]:4.2f}x ({fastest / bare_fastest:4.2f}x) bare"
        print(
            f"  {name:28s} {median * 1000:6.1f} ms {fastest * 1000:5.1f} ms   "
            f"{ratio if 'list' not in name else ''}"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--settle", type=float, default=0.0, help="pause before each (s)")
    parser.add_argument("--save-rounds", type=int, default=15)
    parser.add_argument("--after-save", type=float, default=2.0, help="save-to-call pause (s)")
    args = parser.parse_args()
    main(args.rounds, args.settle, args.save_rounds, args.after_save)
