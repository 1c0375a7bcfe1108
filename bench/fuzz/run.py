"""The long fuzz run: many hostile requests into a real `kiln dev`, then the catalog checked.

Starts `kiln dev` (examples, the conformance fixtures and two tools made for this run: one
with a backtracking-prone schema pattern, one that prints a lone surrogate in `kiln/content`),
sends `--requests` cases from `cases.py` (MCP on both wires, REST with the author key,
odd methods, paths and headers) from a few concurrent clients, and prints:

- responses by status class, and every 5xx (with the case that caused it, first few);
- non-JSON bodies on /mcp paths (an empty 202 is the only body allowed not to be JSON);
- non-JSON bodies on /api paths, requests the server dropped without an answer;
- whether the catalog is intact afterwards: the seeded tools unchanged, every listed tool
  readable, MCP's tools/list matching REST's enabled tools, add_vat still computing.

    python -m bench.fuzz.run [--requests 50000] [--seed 1] [--concurrency 6]

Exit status 1 when any 5xx, non-JSON /mcp body, dropped request or catalog damage was seen.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench.fuzz.cases import AUTHOR_KEY, Case, Fuzzer

ROOT = Path(__file__).resolve().parents[2]
SEEDED = ["add_vat", "word_stats", "test_simple_text", "pattern_tool", "bad_output"]

PATTERN_TOOL = {
    "name": "pattern_tool",
    "description": "Echoes s; its schema pattern backtracks badly in Python's re.",
    "input_schema": {
        "type": "object",
        "properties": {"s": {"type": "string", "pattern": "^(a+)+$"}},
        "required": ["s"],
    },
}
BAD_OUTPUT = {"name": "bad_output", "description": "Prints a lone surrogate in kiln/content."}
BAD_OUTPUT_CODE = 'print(\'{"kiln/content": [{"type": "text", "text": "x\\\\udfff"}]}\')\n'


def _write_tool(root: Path, manifest: dict[str, Any], code: str) -> None:
    folder = root / str(manifest["name"])
    folder.mkdir(parents=True)
    (folder / "tool.json").write_text(json.dumps(manifest))
    (folder / "main.py").write_text(code)


@contextmanager
def kiln_dev(tmp: Path, port: int) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    extra = tmp / "tools"
    _write_tool(extra, PATTERN_TOOL, "import json,sys\nprint(json.load(sys.stdin)['s'])\n")
    _write_tool(extra, BAD_OUTPUT, BAD_OUTPUT_CODE)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "KILN_"))}
    command = [sys.executable, "-m", "kiln.cli", "dev", "--port", str(port)]
    command += ["--state-dir", str(tmp / ".kiln"), "--author-key", AUTHOR_KEY]
    command += ["--tools", str(ROOT / "examples" / "conformance"), "--tools", str(extra)]
    log = (tmp / "dev.log").open("wb")
    process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            if process.poll() is not None:
                raise SystemExit((tmp / "dev.log").read_text())
            try:
                if httpx.get(url + "/api/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit("kiln dev did not start within 90 s")
            time.sleep(0.2)
        yield url, process
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()


@dataclass
class Tally:
    sent: int = 0
    statuses: Counter[int] = field(default_factory=Counter)
    server_errors: list[tuple[int, Case, bytes]] = field(default_factory=list)
    mcp_not_json: list[tuple[int, Case, bytes]] = field(default_factory=list)
    api_not_json: list[tuple[int, Case, bytes]] = field(default_factory=list)
    dropped: list[tuple[str, Case]] = field(default_factory=list)
    unsendable: int = 0

    def record(self, case: Case, status: int, body: bytes) -> None:
        self.statuses[status] += 1
        if status >= 500:
            self.server_errors.append((status, case, body[:300]))
        if case.method == "HEAD" or (status in (202, 204, 304) and not body):
            return
        try:
            json.loads(body)
        except ValueError:
            where = self.mcp_not_json if case.is_mcp else self.api_not_json
            where.append((status, case, body[:300]))


async def _send(client: httpx.AsyncClient, url: str, case: Case, tally: Tally) -> None:
    try:
        response = await client.request(
            case.method, url + case.path, headers=case.headers, content=case.body
        )
    except httpx.LocalProtocolError:
        tally.unsendable += 1  # the HTTP client itself refuses to send these header bytes
        return
    except httpx.HTTPError as error:
        tally.dropped.append((f"{type(error).__name__}: {error}"[:200], case))
        return
    tally.record(case, response.status_code, response.content)


async def fuzz(url: str, requests: int, seed: int, concurrency: int) -> Tally:
    fuzzer = Fuzzer(seed)
    tally = Tally()
    queue: asyncio.Queue[Case | None] = asyncio.Queue(maxsize=concurrency * 4)
    # Idle connections are dropped before the server would close them (it does at 5 s), so a
    # request never races a server-side close on a pooled connection.
    limits = httpx.Limits(
        max_connections=concurrency, max_keepalive_connections=concurrency, keepalive_expiry=2
    )
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:

        async def worker() -> None:
            while (case := await queue.get()) is not None:
                await _send(client, url, case, tally)

        workers = [asyncio.create_task(worker()) for _ in range(concurrency)]
        started = time.monotonic()
        for index in range(requests):
            await queue.put(fuzzer.case())
            tally.sent += 1
            if index and index % 5000 == 0:
                rate = index / (time.monotonic() - started)
                print(f"  {index} sent ({rate:.0f}/s), 5xx so far: {len(tally.server_errors)}")
        for _ in workers:
            await queue.put(None)
        await asyncio.gather(*workers)
    return tally


def _api(url: str, method: str, path: str, **kw: Any) -> httpx.Response:
    headers = {"Authorization": f"Bearer {AUTHOR_KEY}"}
    return httpx.request(method, url + path, headers=headers, timeout=60, **kw)


def catalog_state(url: str) -> dict[str, Any]:
    """The seeded tools as REST shows them (revision, code, schema: what must not change)."""
    return {name: _api(url, "GET", f"/api/tools/{name}").json() for name in SEEDED}


def catalog_problems(url: str, before: dict[str, Any]) -> list[str]:
    problems: list[str] = []
    after = catalog_state(url)
    for name in SEEDED:
        if after[name] != before[name]:
            problems.append(f"{name} changed")
    listed = _api(url, "GET", "/api/tools").json()["tools"]
    for tool in listed:
        if _api(url, "GET", f"/api/tools/id:{tool['id']}").status_code != 200:
            problems.append(f"{tool['name']!r} is listed but cannot be read")
    enabled = {tool["name"] for tool in listed if tool["enabled"]}
    if _mcp_tool_names(url) != enabled:
        problems.append("MCP tools/list and REST disagree on the enabled tools")
    call = {"name": "add_vat", "arguments": {"net": 100}}
    result = _mcp(url, "tools/call", call)["result"]
    if '"gross": "120.00"' not in result["content"][0]["text"]:
        problems.append(f"add_vat no longer computes: {result}")
    return problems


def _mcp(url: str, method: str, params: dict[str, Any]) -> Any:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    headers = {"MCP-Protocol-Version": "2025-11-25"}
    return httpx.post(url + "/mcp", json=body, headers=headers, timeout=60).json()


def _mcp_tool_names(url: str) -> set[str]:
    names: set[str] = set()
    params: dict[str, Any] = {}
    while True:
        result = _mcp(url, "tools/list", params)["result"]
        names |= {tool["name"] for tool in result["tools"]}
        if not result.get("nextCursor"):
            return names
        params = {"cursor": result["nextCursor"]}


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def log_errors(log: Path) -> Counter[str]:
    """The last line of each traceback kiln dev logged, counted."""
    found: Counter[str] = Counter()
    lines = log.read_text("utf-8", "replace").splitlines()
    for index, line in enumerate(lines):
        if line.startswith("Traceback"):
            end = index + 1
            while end < len(lines) and lines[end].startswith((" ", "\t", "During", "The above")):
                end += 1
            if end < len(lines):
                found[lines[end][:160]] += 1
    return found


def report(tally: Tally, seconds: float, problems: list[str], log_bytes: int) -> bool:
    classes = Counter(f"{status // 100}xx" for status in tally.statuses.elements())
    rate = tally.sent / seconds
    print(f"\nrequests sent:            {tally.sent} in {seconds:.0f} s ({rate:.0f}/s)")
    print(f"answered by class:        {dict(sorted(classes.items()))}")
    print(f"not sendable by client:   {tally.unsendable}")
    print(f"5xx responses:            {len(tally.server_errors)}")
    print(f"non-JSON bodies on /mcp:  {len(tally.mcp_not_json)}")
    print(f"non-JSON bodies on /api:  {len(tally.api_not_json)}")
    print(f"dropped without answer:   {len(tally.dropped)}")
    print(f"kiln dev log:             {log_bytes} bytes")
    print(f"catalog intact:           {'yes' if not problems else 'NO: ' + '; '.join(problems)}")
    for label, items in (
        ("5xx", tally.server_errors),
        ("non-JSON /mcp", tally.mcp_not_json),
        ("non-JSON /api", tally.api_not_json),
    ):
        for status, case, body in items[:5]:
            print(f"  {label}: {status} {case.method} {case.path} {case.body[:120]!r} -> {body!r}")
    for kind, case in tally.dropped[:5]:
        print(f"  dropped: {kind} {case.method} {case.path} {len(case.body)} bytes")
        print(f"    headers {case.headers!r:.300} body {case.body[:200]!r}")
    return not (tally.server_errors or tally.mcp_not_json or tally.dropped or problems)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=50_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--concurrency", type=int, default=6)
    parser.add_argument("--port", type=int, default=18_765)
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory(prefix="kiln-fuzz-") as tmp,
        kiln_dev(Path(tmp), args.port) as (url, process),
    ):
        before = catalog_state(url)
        rss_before = _rss_mib(process.pid)
        print(f"fuzzing {url} with {args.requests} requests (seed {args.seed})")
        started = time.monotonic()
        tally = asyncio.run(fuzz(url, args.requests, args.seed, args.concurrency))
        seconds = time.monotonic() - started
        problems = catalog_problems(url, before)
        print(f"kiln dev RSS:             {rss_before:.0f} MiB -> {_rss_mib(process.pid):.0f} MiB")
        log = Path(tmp) / "dev.log"
        ok = report(tally, seconds, problems, log.stat().st_size)
        for line, count in log_errors(log).most_common(10):
            print(f"  logged {count}x: {line}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
