"""Kiln Studio's budgets: shipped JS + CSS gzipped, and time to ready in Chromium.

Run: .venv/bin/python -m bench.studio.run [--rounds N]   (needs /usr/bin/chromium)

Size: every .js and .css file of functions/kiln/studio/dist, gzipped at level 9, summed.
Budget 350 KB.

Ready: a real `kiln dev` (embedded emulator) holding 30 tools; Chromium (Debian's) opens
/studio/ in a fresh context each round (cold cache), so nothing is reused between rounds.
- "sign-in ready": navigation start to the app's `kiln-studio-ready` mark, no key.
- "tools ready, with usage": with an author key in session storage, navigation start to the
  `kiln-tools-ready` mark (whoami, tool list, bundle list and each tool's calls and error rate
  in the last 24 hours fetched and rendered; the ledger is seeded with 20 calls per tool, and the
  round fails unless all 30 usage cells are on the page). Budget: < 1000 ms on an idle machine.
- "tools ready, no usage": the same page with a call key (read-only studio: no usage and no
  bundle columns): the baseline the usage columns are measured against.
Also a baseline: navigation start to the end of the response of /api/health (one request, no
script). Prints medians, their ratios to the baselines, the median start and end of each
request the tool list makes (the browser's resource timing, ms from navigation start), and
`uptime`'s load average before and after. Last, the usage read alone, both ways, through
the API: the list's `?hours=24` (hourly totals) against `?days=2` (day totals): the same reads.
"""

from __future__ import annotations

import argparse
import gzip
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from playwright.sync_api import sync_playwright

DIST = Path(__file__).resolve().parents[2] / "functions" / "kiln" / "studio" / "dist"
CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
KEY = "bench-studio-author-key-0123456789"
SIZE_BUDGET_KB = 350.0
READY_BUDGET_MS = 1000.0


def shipped_size() -> None:
    total = 0
    for path in sorted(DIST.rglob("*")):
        if path.suffix in {".js", ".css"}:
            size = len(gzip.compress(path.read_bytes(), compresslevel=9))
            total += size
            print(
                f"  {path.relative_to(DIST)}: {path.stat().st_size / 1024:.1f} KB,"
                f" gzip {size / 1024:.1f} KB"
            )
    kb = total / 1024
    verdict = "within" if kb <= SIZE_BUDGET_KB else "OVER"
    print(
        f"shipped JS+CSS gzipped: {kb:.1f} KB; budget {SIZE_BUDGET_KB:.0f} KB "
        f"({kb / SIZE_BUDGET_KB:.2f}x of budget, {verdict})"
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_dev(state: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "KILN_"))}
    command = [sys.executable, "-m", "kiln.cli", "dev", "--port", str(port), "--no-examples"]
    command += ["--state-dir", str(state), "--author-key", KEY]
    process = subprocess.Popen(
        command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        if process.poll() is not None:
            raise SystemExit("kiln dev exited")
        try:
            if httpx.get(url + "/api/health", timeout=1).status_code == 200:
                return process, url
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            raise SystemExit("kiln dev did not start in 60 s")
        time.sleep(0.1)


def seed(url: str, count: int) -> None:
    headers = {"Authorization": f"Bearer {KEY}"}
    for n in range(count):
        body = {
            "name": f"tool_{n:02d}",
            "description": f"Bench tool {n}.",
            "language": "python",
            "code": "import json, sys\nprint(json.dumps(json.load(sys.stdin)))\n",
        }
        httpx.post(url + "/api/tools", json=body, headers=headers, timeout=30).raise_for_status()


def seed_ledger(state: Path, tools: int, per_tool: int) -> None:
    """`per_tool` ledger entries for each tool over the last hours, written to the emulator."""
    from kiln.accounting.ledger import CallLedger, CallRecord, Outcome
    from kiln.aws.clients import make_clients
    from kiln.local.emulator import shared_endpoint

    endpoint = shared_endpoint(state / "aws")
    assert endpoint is not None, f"no emulator described in {state / 'aws'}"
    keys = (endpoint.credentials.access_key_id, endpoint.credentials.secret_access_key)
    clients = make_clients(endpoint_url=endpoint.url, region=endpoint.region, credentials=keys)
    ledger = CallLedger(clients.dynamodb, table="kiln", digest_key=b"bench")
    now = time.time()
    for n in range(tools):
        for i in range(per_tool):
            outcome: Outcome = "tool_error" if i % 7 == 0 else "ok"
            entry = CallRecord(at="", caller="key:bench", tool=f"tool_{n:02d}",
                               outcome=outcome, revision=1, duration_ms=40.0 + i)  # fmt: skip
            ledger.record(entry, started=now - 600 * (i + 1))
    ledger.day_totals.flush()  # this process's totals, which the tool list reads


def call_key(url: str) -> str:
    headers = {"Authorization": f"Bearer {KEY}"}
    body = {"name": "bench-reader", "scope": "call"}
    made = httpx.post(url + "/api/keys", json=body, headers=headers, timeout=30)
    made.raise_for_status()
    return str(made.json()["key"])


def load_average() -> str:
    """`uptime`'s load average (1, 5, 15 minutes) on this machine's cores."""
    one, five, fifteen = Path("/proc/loadavg").read_text().split()[:3]
    return f"{one}, {five}, {fifteen} on {os.cpu_count()} cores"


def tools_page(browser: Any, url: str, key: str) -> tuple[Any, Any, float]:
    """A fresh context on the tool list signed in with `key`; its page and ready time."""
    context = browser.new_context()
    context.add_init_script(f"sessionStorage.setItem('kiln.studio.key', '{key}')")
    page = context.new_page()
    page.goto(url + "/studio/#/tools")
    return context, page, mark(page, "kiln-tools-ready")


REQUESTS = """() => performance.getEntriesByType('resource')
    .filter((e) => e.name.includes('/api/'))
    .map((e) => [e.name.slice(e.name.indexOf('/api/')), e.startTime, e.responseEnd])"""


def mark(page: Any, name: str) -> float:
    page.wait_for_function(f"() => performance.getEntriesByName('{name}').length > 0")
    return float(page.evaluate(f"() => performance.getEntriesByName('{name}')[0].startTime"))


def measure(browser: Any, url: str, rounds: int, reader: str) -> None:
    baseline, signin, tools, bare = [], [], [], []
    requests: dict[str, list[tuple[float, float]]] = {}
    for _ in range(rounds):
        context = browser.new_context()
        page = context.new_page()
        page.goto(url + "/api/health")
        baseline.append(
            page.evaluate("() => performance.getEntriesByType('navigation')[0].responseEnd")
        )
        context.close()

        context = browser.new_context()
        page = context.new_page()
        page.goto(url + "/studio/")
        signin.append(mark(page, "kiln-studio-ready"))
        context.close()

        context, page, ready = tools_page(browser, url, reader)
        bare.append(ready)
        context.close()

        context, page, ready = tools_page(browser, url, KEY)
        tools.append(ready)
        shown = page.locator("[data-testid='calls-recent'] a").count()
        assert shown == 30, f"the tool list showed usage for {shown} of 30 tools"
        for name, start, end in page.evaluate(REQUESTS):
            requests.setdefault(name, []).append((start, end))
        context.close()
    report(baseline, signin, bare, tools, requests)


def report(
    baseline: list[float],
    signin: list[float],
    bare: list[float],
    tools: list[float],
    requests: dict[str, list[tuple[float, float]]],
) -> None:
    base, plain = statistics.median(baseline), statistics.median(bare)
    print(f"baseline (/api/health navigation): median {base:.0f} ms")
    print(f"sign-in ready: median {statistics.median(signin):.0f} ms "
          f"({statistics.median(signin) / base:.1f}x /api/health)")  # fmt: skip
    print(f"baseline tools ready, no usage (call key, 30 tools): median {plain:.0f} ms, "
          f"max {max(bare):.0f} ms ({plain / base:.1f}x /api/health)")  # fmt: skip
    median = statistics.median(tools)
    verdict = "within" if median < READY_BUDGET_MS else "OVER"
    print(
        f"tools ready with usage (author key, 30 tools, 600 ledger entries): median "
        f"{median:.0f} ms, max {max(tools):.0f} ms ({median / plain:.2f}x the list without "
        f"usage, {median / base:.1f}x /api/health; budget {READY_BUDGET_MS:.0f} ms, {verdict})"
    )
    print("  requests of the list with usage (median start -> end, ms from navigation start):")
    for name, spans in requests.items():
        start = statistics.median(s for s, _ in spans)
        end = statistics.median(e for _, e in spans)
        print(f"    {name}: {start:.0f} -> {end:.0f} ({end - start:.0f} ms)")


def usage_reads(url: str, rounds: int) -> None:
    """The two ways to read every tool's usage from the ledger's totals, one after the other,
    through the API: the list's (the last 24 hours from the hourly totals) against the day
    totals of today and yesterday. Both read the same two days' items: about 1.0x."""
    headers = {"Authorization": f"Bearer {KEY}"}
    times: dict[str, list[float]] = {"hours=24": [], "days=2": []}
    with httpx.Client(headers=headers, timeout=60) as client:
        for _ in range(rounds):
            for query, spent in times.items():
                started = time.perf_counter()
                client.get(f"{url}/api/calls/by-tool?{query}").raise_for_status()
                spent.append((time.perf_counter() - started) * 1000)
    hourly, daily = statistics.median(times["hours=24"]), statistics.median(times["days=2"])
    print(
        f"GET /api/calls/by-tool?hours=24 (hourly totals, the list's): median {hourly:.0f} ms; "
        f"?days=2 (day totals): median {daily:.0f} ms ({hourly / daily:.2f}x)"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    shipped_size()
    print(f"load average before: {load_average()}")
    with tempfile.TemporaryDirectory() as state:
        process, url = start_dev(Path(state))
        try:
            seed(url, 30)
            seed_ledger(Path(state), 30, 20)
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
                measure(browser, url, args.rounds, call_key(url))
                browser.close()
            usage_reads(url, args.rounds)
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=20)
    print(f"load average after: {load_average()}")


if __name__ == "__main__":
    main()
