"""Bench: save-to-callable, the author's loop. `python -m bench.bundles.run --save-to-callable`.

A tool with packages is saved through the REST API of a fresh app (its own background
builder, as `kiln dev` runs it); the clock stops at the first tools/call that answers with the
tool's output (calls are retried every 50 ms while the bundle is queued or building). All in
one run, each variant with its own table and bucket (same requirements would otherwise share a
bundle) and its own empty caches:

  python, pip     requests + pydantic + boto3, KILN_BUNDLE_INSTALLER=pip, empty pip cache
  python, uv      the same with uv and an empty build cache (the baseline's ratio: <= 0.3x)
  python, uv 2nd  a second tool, the same requirements plus humanize, on uv's now-warm cache
  node, npm       lodash + dayjs with npm (today's build), empty npm cache
  node, bun       the same with Bun (if found: --bun, KILN_BUN or PATH), empty Bun cache

`--cold-pairs N`: the two cold Python rows N times, in turns that alternate which goes first
(pip then uv, uv then pip, ...), so that an index or proxy that slows down (or warms up)
during the run weighs on both alike; the ratio is the median of the pairs' ratios.
`--second-tool N`: only the two uv rows, N times over, with the spread of the second.
Each row is printed with the machine's load (1-minute average) when it was measured.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from kiln.aws.clients import AwsClients, ensure_resources
from kiln.settings import Settings

PY_REQUIREMENTS = ["requests", "pydantic", "boto3"]
PY_CODE = """import json, sys
import boto3, pydantic, requests
args = json.load(sys.stdin)
print(json.dumps({"ok": args["n"], "requests": requests.__version__}))
"""
PY_CODE_2 = PY_CODE.replace("import boto3,", "import humanize, boto3,")
NODE_REQUIREMENTS = ["lodash", "dayjs"]
NODE_CODE = """const _ = require('lodash'); const dayjs = require('dayjs');
let s = ''; process.stdin.on('data', d => s += d).on('end', () => {
  const args = JSON.parse(s);
  console.log(JSON.stringify({ok: _.identity(args.n), year: dayjs('2020-01-02').year()}));
});
"""


def tool(name: str, language: str, code: str, requirements: list[str]) -> dict[str, Any]:
    return {
        "name": name, "description": "Bench tool.", "language": language, "code": code,
        "requirements": requirements,
        "input_schema": {"type": "object", "properties": {"n": {"type": "integer"}}},
    }  # fmt: skip


Row = tuple[str, float, float]  # what, seconds, the load (1-minute average) when measured


def row(label: str, seconds: float) -> Row:
    return label, seconds, os.getloadavg()[0]


def save_to_callable(http: httpx.Client, url: str, key: str, body: dict[str, Any]) -> float:
    """Seconds from the save's request to the first call that ran the tool."""
    started = time.perf_counter()
    saved = http.post(f"{url}/api/tools", json=body, headers={"Authorization": f"Bearer {key}"})
    if saved.status_code >= 300:
        raise RuntimeError(f"save failed: {saved.status_code} {saved.text}")
    request = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
               "params": {"name": body["name"], "arguments": {"n": 7}}}  # fmt: skip
    headers = {"Accept": "application/json, text/event-stream",
               "MCP-Protocol-Version": "2025-06-18"}  # fmt: skip
    while time.perf_counter() - started < 900:
        result = http.post(f"{url}/mcp", json=request, headers=headers).json()["result"]
        text = result["content"][0]["text"]
        if not result.get("isError"):
            assert json.loads(text)["ok"] == 7, text
            return time.perf_counter() - started
        if "being built" not in text and "queued to be built" not in text:
            raise RuntimeError(f"{body['name']}: {text}")
        time.sleep(0.05)
    raise RuntimeError(f"{body['name']} was not callable within 900 s")


def run_variants(
    base: Settings, clients: AwsClients, serve: Any, key: str, bun: str | None, pairs: int = 1
) -> list[Row]:
    scratch = Path(tempfile.mkdtemp(prefix="kiln-bench-save-"))
    rows: list[Row] = []
    splits: dict[str, list[tuple[float, float]]] = {"pip": [], "uv": []}  # seconds, online
    node_variants = [("npm", "off")] + ([("bun", bun)] if bun else [])
    turns = [(n, i) for n in range(pairs) for i in (("pip", "uv"), ("uv", "pip"))[n % 2]]
    try:
        with httpx.Client(timeout=300) as http:
            for number, installer in turns:
                folder = scratch / f"{installer}-{number}"
                settings = _variant(base, clients, folder, bundle_installer=installer)
                with serve(settings, clients) as url:
                    splits[installer].append(_cold_row(http, url, key, installer, rows))
                    if installer == "uv" and number == 0:
                        body = tool(
                            "needs_more", "python", PY_CODE_2, [*PY_REQUIREMENTS, "humanize"]
                        )
                        saved_at = time.time()
                        second = save_to_callable(http, url, key, body)
                        rows.append(row("python, uv, 2nd tool (+humanize)", second))
                        where = stages(http, url, key, saved_at, second)
                        print(f"2nd tool: {second:.2f} s ({where})", flush=True)
            for name, path in node_variants:
                os.environ["NPM_CONFIG_CACHE"] = str(scratch / name / "npm-cache")
                settings = _variant(base, clients, scratch / name, bun=path)
                with serve(settings, clients) as url:
                    body = tool("node_packages", "node", NODE_CODE, NODE_REQUIREMENTS)
                    rows.append(row(f"node, {name}, cold", save_to_callable(http, url, key, body)))
    finally:
        os.environ.pop("NPM_CONFIG_CACHE", None)
        shutil.rmtree(scratch, ignore_errors=True)
    for pip, uv in zip(splits["pip"], splits["uv"], strict=False):
        _split_report(pip, uv)
    return rows


def _cold_row(
    http: httpx.Client, url: str, key: str, installer: str, rows: list[Row]
) -> tuple[float, float]:
    """The first tool, cold: its row, its stages, its installer's share and the network's."""
    body = tool("needs_packages", "python", PY_CODE, PY_REQUIREMENTS)
    saved_at = time.time()
    rows.append(row(f"python, {installer}, cold", save_to_callable(http, url, key, body)))
    seconds = rows[-1][1]
    where, record = _stages(http, url, key, saved_at, seconds, "needs_packages")
    print(f"{installer} cold: {seconds:.2f} s ({where})", flush=True)
    online = installer_seconds(record)
    print(f"  {installer}'s commands that ask the index: {online:.2f} s; the rest (Kiln: "
          f"bytecode, folders, hand-over, first call): {seconds - online:.2f} s")  # fmt: skip
    if record.get("lock"):
        print(f"  {network_probe(record['lock'])}", flush=True)
    return seconds, online


def _split_report(pip: tuple[float, float], uv: tuple[float, float]) -> None:
    """uv / pip with and without the installers' commands that ask the index."""
    (pip_s, pip_online), (uv_s, uv_online) = pip, uv
    rest = (uv_s - uv_online) / (pip_s - pip_online)
    print(f"python: uv / pip without the index's part {rest:.2f}x ({uv_s - uv_online:.2f} s / "
          f"{pip_s - pip_online:.2f} s); the index's part alone {uv_online / pip_online:.2f}x "
          f"({uv_online:.2f} s / {pip_online:.2f} s)")  # fmt: skip


def second_tool_runs(
    base: Settings, clients: AwsClients, serve: Any, key: str, repeat: int
) -> list[Row]:
    """Only the uv rows, `repeat` times over (each with its own empty caches): the spread of
    the second tool's save-to-callable, without pip's minutes."""
    rows: list[Row] = []
    for _ in range(repeat):
        scratch = Path(tempfile.mkdtemp(prefix="kiln-bench-save-"))
        try:
            settings = _variant(base, clients, scratch / "uv", bundle_installer="uv")
            with httpx.Client(timeout=300) as http, serve(settings, clients) as url:
                body = tool("needs_packages", "python", PY_CODE, PY_REQUIREMENTS)
                rows.append(row("python, uv, cold", save_to_callable(http, url, key, body)))
                print(f"uv cold: {rows[-1][1]:.2f} s (load {rows[-1][2]:.1f})", flush=True)
                body = tool("needs_more", "python", PY_CODE_2, [*PY_REQUIREMENTS, "humanize"])
                saved_at = time.time()
                second = save_to_callable(http, url, key, body)
                rows.append(row("python, uv, 2nd tool (+humanize)", second))
                print(f"2nd tool: {second:.2f} s ({stages(http, url, key, saved_at, second)}; "
                      f"load {os.getloadavg()[0]:.1f})", flush=True)  # fmt: skip
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    seconds = sorted(value for label, value, _ in rows if "2nd" in label)
    spread = f"{seconds[0]:.2f}-{seconds[-1]:.2f} s over {len(seconds)} runs"
    print(f"python: 2nd tool, same + 1 package: median {statistics.median(seconds):.2f} s, "
          f"{spread} (goal <= 3 s)")  # fmt: skip
    return rows


def stages(
    http: httpx.Client, url: str, key: str, saved_at: float, total: float, name: str = "needs_more"
) -> str:
    """Where a tool's time went (the second's by default), from its bundle's record."""
    return _stages(http, url, key, saved_at, total, name)[0]


def _stages(
    http: httpx.Client, url: str, key: str, saved_at: float, total: float, name: str
) -> tuple[str, dict[str, Any]]:
    auth = {"Authorization": f"Bearer {key}"}
    bundle_id = http.get(f"{url}/api/tools/{name}", headers=auth).json()["bundle_id"]
    read = f"{url}/api/bundles/{bundle_id}?log=true"
    record = http.get(read, headers=auth).json()
    give_up = time.monotonic() + 120
    while record["status"] == "building" and time.monotonic() < give_up:  # callable first
        time.sleep(0.05)
        record = http.get(read, headers=auth).json()
    steps = [line[2:] for line in (record.get("log") or "").splitlines()
             if line.startswith("# ") and (" s" in line) and "done in" not in line]  # fmt: skip

    def at(field: str) -> float:
        return datetime.fromisoformat(record[field].replace("Z", "+00:00")).timestamp()

    queued, ready = at("started_at") - saved_at, at("finished_at") - saved_at
    handed = re.search(r"# handed over after ([0-9.]+) s, in ([0-9.]+) s", record.get("log") or "")
    callable_at = queued + sum(map(float, handed.groups())) if handed else float("nan")
    return (f"queued {queued:.2f}, build {record['duration_s']} s, in this process's bundle "
            f"cache (callable) {callable_at:.2f} s, answered {total:.2f} s "
            f"(the first call: {total - callable_at:.2f} s) and marked ready {ready:.2f} s after "
            f"the save (the zip uploaded); build log: {'; '.join(steps)}"), record  # fmt: skip


def installer_seconds(record: dict[str, Any]) -> float:
    """The seconds of the build's installer commands that talk to the index (uv's resolving
    install, uv's compiles and installs that are not offline, pip's install), from its log."""
    total = 0.0
    for line in (record.get("log") or "").splitlines():
        what, _, took = line[2:].rpartition(": ")
        online = what.startswith(("uv pip", "pip install")) and "offline" not in what
        if line.startswith("# ") and online and took.endswith(" s"):
            total += float(took[:-2])
    return total


def network_probe(lock: list[dict[str, Any]]) -> str:
    """The network now, without any installer: the lock's wheels fetched again by plain
    parallel GETs on new connections (no cache), timed."""
    urls = [str(entry["url"]) for entry in lock if str(entry.get("url")).startswith("https://")]
    started = time.perf_counter()
    with httpx.Client(timeout=120, follow_redirects=True) as client, ThreadPoolExecutor(8) as pool:
        sizes = list(pool.map(lambda one: len(client.get(one).raise_for_status().content), urls))
    took = time.perf_counter() - started
    return (f"network now: {len(urls)} wheels of the lock, {sum(sizes) / 2**20:.1f} MB, fetched "
            f"again in {took:.2f} s by plain GETs (load {os.getloadavg()[0]:.1f})")  # fmt: skip


def _variant(base: Settings, clients: AwsClients, folder: Path, **changes: Any) -> Settings:
    """Settings with their own table, bucket and empty caches."""
    name = f"kiln-bench-{uuid.uuid4().hex[:8]}"
    ensure_resources(clients, table=name, bucket=name)
    folder.mkdir(parents=True)
    return base.with_(
        table=name, bucket=name, build_cache_dir=folder / "build-cache",
        bundle_cache_dir=folder / "bundles", **changes,
    )  # fmt: skip


def report(rows: list[Row]) -> None:
    values = {label: seconds for label, seconds, _ in rows}
    loads = {label: load for label, _, load in rows}
    print(f"{'save-to-callable':40} {'seconds':>9} {'load':>6}")
    for label, seconds, load in rows:
        print(f"{label:40} {seconds:9.2f} {load:6.1f}")
    print()

    def at(*labels: str) -> str:
        return "load " + "/".join(f"{loads[label]:.1f}" for label in labels)

    pips = [(s, load) for label, s, load in rows if label == "python, pip, cold"]
    uvs = [(s, load) for label, s, load in rows if label == "python, uv, cold"]
    ratios = [uv / pip for (pip, _), (uv, _) in zip(pips, uvs, strict=False)]
    loads_seen = [load for _, load in pips + uvs]
    each = f" (pairs: {', '.join(f'{r:.2f}x' for r in ratios)})" if len(ratios) > 1 else ""
    print(f"python: uv cold / pip cold                 {statistics.median(ratios):6.2f}x   "
          f"(goal <= 0.3x; load {min(loads_seen):.1f}-{max(loads_seen):.1f}){each}")  # fmt: skip
    label = "python, uv, 2nd tool (+humanize)"
    print(f"python: 2nd tool, same + 1 package          {values[label]:6.2f} s   (goal <= 3 s; "
          f"{at(label)})")  # fmt: skip
    if "node, bun, cold" in values:
        ratio = values["node, bun, cold"] / values["node, npm, cold"]
        print(f"node: bun cold / npm cold (today's build)   {ratio:6.2f}x   "
              f"({at('node, npm, cold', 'node, bun, cold')})")  # fmt: skip
    else:
        print(f"node: npm cold (today's build)              {values['node, npm, cold']:6.2f} s   "
              f"(no Bun here: --bun, KILN_BUN or PATH; {at('node, npm, cold')})")  # fmt: skip
    print(f"load: {os.getloadavg()[0]:.1f} {os.getloadavg()[1]:.1f} {os.getloadavg()[2]:.1f}")


def find_bun(given: str | None) -> str | None:
    return given or os.environ.get("KILN_BUN") or shutil.which("bun")
