"""End-to-end `tools/call` latency over HTTP, beside a bare interpreter start.

Run: python -m bench.runner.http_call [--rounds N]

Starts `kiln dev` as a real process (embedded moto, uvicorn on a free loopback port) with
two trivial tools, one Python and one Node, then times MCP `tools/call` POSTs with a kept-alive
HTTP client, interleaved round by round with a bare start of the same interpreter
(`python -I -S -c pass`, `node -e 0`). Prints medians and ratios; the goals (issue 16) are
1.2x of bare for Python and 1.5x for Node. Also times `tools/list`, which runs no script, as
the floor the server adds to every call. Then `--save-rounds` rounds of the author's loop: save
a new revision of each tool through the REST API and time its first call, sent `--after-save`
seconds (default 1) after the save's answer came back, and sent at once (a save answers once
the new revision's standby is ready: kiln.serving.warming). Those are compared with two
baselines at rest from the same run: the bare start back to back, and the bare start after
the same idle pause (this VM wakes slowly from idle; see `after_saves`), with a call after the
same pause and no save as the control.

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

BARE = {"python": "bare python -I -S -c pass", "node": "bare node -e 0"}
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


def save(client: httpx.Client, name: str, number: int) -> float:
    """Save a new revision of tool `name` through the REST API; seconds until it answered."""
    script, code = TOOLS[name]
    comment = "#" if script.endswith(".py") else "//"
    body = {
        "name": name, "description": f"Benchmark tool {name}: prints ok.",
        "language": "python" if script.endswith(".py") else "node",
        "code": f"{code.rstrip()}  {comment} revision {number}\n", "input_schema": {},
    }  # fmt: skip
    tag = client.get(f"/api/tools/{name}", headers=AUTHOR).headers["etag"]
    started = time.perf_counter()
    saved = client.put(f"/api/tools/{name}", json=body, headers={**AUTHOR, "If-Match": tag})
    took = time.perf_counter() - started
    assert saved.status_code == 200, saved.text
    return took


def after_saves(
    client: httpx.Client, rounds: int, pause_s: float, bare: dict[str, Callable[[], object]]
) -> dict[str, list[float]]:
    """The author's loop: save a new revision, then call it.

    Per round and tool, each timed sample is the first thing done after its pause, so that
    every one meets the machine in the same state (this VM is slow to wake after an idle
    pause: a bare start after 1 s idle is several times one back to back):
    - `pause_s` idle, then a bare start: the baseline at rest (nothing else running);
    - `pause_s` idle, then a call with no save before it (its standby is the last call's);
    - a save, `pause_s` after its answer came back, the call (an author's client calls a
      second or so after the save);
    - a save, and the call sent as soon as its answer came back.
    """
    samples: dict[str, list[float]] = {}

    def add(label: str, seconds: float) -> None:
        samples.setdefault(label, []).append(seconds)

    for number in range(rounds):
        for name, (script, _) in TOOLS.items():
            lang = "node" if script.endswith(".js") else "python"
            time.sleep(pause_s)
            add(f"bare {lang}, {pause_s:g} s idle", timed(bare[BARE[lang]]))
            author_loop(client, name, lang, 2 * number, pause_s, add)
            time.sleep(pause_s)  # its next standby, its ledger entry: before the next sample
    return samples


def author_loop(
    client: httpx.Client,
    name: str,
    label: str,
    revision: int,
    pause_s: float,
    add: Callable[[str, float], None],
) -> None:
    """One round of the author's loop for tool `name` (see `after_saves`): `pause_s` idle and
    a call with no save; a save (revision `revision`), `pause_s`, and its first call; a save
    (`revision + 1`) and its first call at once. Seconds go to `add`, labelled `label`."""
    call = caller(client)(name)
    time.sleep(pause_s)
    add(f"{label} call, {pause_s:g} s idle, no save", timed(call))
    add(f"  {label} save (answer)", save(client, name, revision))
    time.sleep(pause_s)
    add(f"{label} first call {pause_s:g} s after a save", timed(call))
    add(f"  {label} save (answer)", save(client, name, revision + 1))
    add(f"{label} first call at once after a save", timed(call))


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
    report_saves(saves, samples, save_rounds, pause_s)
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


def report_saves(
    saves: dict[str, list[float]], rest: dict[str, list[float]], rounds: int, pause_s: float
) -> None:
    """The author's loop, against two baselines at rest from this run: the bare start back to
    back (the loop above) and the bare start after the same idle pause."""
    print(
        f"\nThe first call after a save ({rounds} rounds; 'after a save' = sent {pause_s:g} s "
        "after the save's answer came back, or at once; a save answers once the new "
        "revision's standby is ready, its script waiting for the call). "
        "Goals: 1.0x bare Python, 1.2x bare Node."
    )
    print(f"  {'':40s} {'median':>9s} {'min':>8s}   x bare back to back   x bare after idle")
    for lang in ("python", "node"):
        at_rest = statistics.median(rest[BARE[lang]])
        idle = statistics.median(saves[f"bare {lang}, {pause_s:g} s idle"])
        print(f"  {'bare ' + lang + ', back to back (above)':40s} {at_rest * 1000:6.1f} ms")
        for label, values in saves.items():
            if lang not in label:
                continue
            median = statistics.median(values)
            ratios = "" if "save (answer)" in label else (
                f"{median / at_rest:10.2f}x {median / idle:19.2f}x"
            )  # fmt: skip
            print(f"  {label:40s} {median * 1000:6.1f} ms {min(values) * 1000:5.1f} ms  {ratios}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--settle", type=float, default=0.0, help="pause before each (s)")
    parser.add_argument("--save-rounds", type=int, default=15)
    parser.add_argument("--after-save", type=float, default=1.0, help="save-to-call pause (s)")
    args = parser.parse_args()
    main(args.rounds, args.settle, args.save_rounds, args.after_save)
