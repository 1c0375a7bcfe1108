"""What one request costs: the AWS calls and the compute of every function it passes through.

The public function (`mcp`) and the runner function it sends each run to run as Lambda runs
them, each under the real runtime client in a sandbox of its own (bench/cost/lambdas.py), with
template.yaml's settings, against the local emulator, whose call log (`--call-log`) records
every AWS request and the role (function) that made it. Per request type the script prints the
calls by operation, DynamoDB units (reads per 4 KB, half for eventually consistent ones; writes
per 1 KB, twice in a transaction), response and log bytes, and the cost per million requests at
list prices, for x86_64 and arm64. The front door (the HTTP API, $1.00 per million) is left
out, as the goal says; egress is listed apart.

How a function's billed time is estimated (not its wall time on this machine, which the load
of a shared 2-core machine inflates several times): its processes' CPU time (user + system,
with the tool's process that the runner starts and reaps), stretched by 1769 / memory MB below
1,769 MB (Lambda gives a whole vCPU at 1,769 MB and a share in proportion below), plus the time
the emulator spent answering its AWS calls (as the call log times them: the store's own time),
plus, for `mcp`, the runner's time and INVOKE_MS for each invoke it waits on. Warm invocations
only: a container's init is paid once per container. The wall time is printed beside it.

Logs: what each function writes (one compact line per request), plus Lambda's own START, END
and REPORT lines with `--text-logs`: template.yaml's `SystemLogLevel: WARN` (JSON format)
drops them.

usage: python -m bench.cost.run [--requests 40] [--mcp-mb 512] [--runner-mb 2048] [--text-logs]
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import math
import os
import signal
import statistics
import subprocess
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

from bench.cost import lambdas  # noqa: E402
from tests.support.tools import ECHO  # noqa: E402

# us-east-1 list prices, as published on 2026-12-01.
PRICES_DATE = "2026-12-01"
LAMBDA_GB_S = {"x86_64": 0.0000166667, "arm64": 0.0000133334}
LAMBDA_REQUEST = 0.20 / 1e6
DDB_READ_UNIT = 0.125 / 1e6  # on-demand read request unit
DDB_WRITE_UNIT = 0.625 / 1e6  # on-demand write request unit
S3_GET = 0.0004 / 1000
LOGS_GB = 0.50  # CloudWatch Logs ingestion (standard class)
EGRESS_GB = 0.09
FULL_VCPU_MB = 1769  # Lambda: one whole vCPU at 1,769 MB, a proportional share below
INVOKE_MS = 15.0  # a synchronous Invoke's own round trip in a region: assumed, not measured
# START RequestId: <36> Version: $LATEST / END RequestId: <36> / REPORT RequestId: <36> with
# Duration, Billed Duration, Memory Size and Max Memory Used: LogFormat Text, per invocation.
PLATFORM_TEXT_BYTES = 71 + 52 + 150
MEMORY = {"mcp": 512, "runner": 2048}  # as template.yaml
FUNCTIONS = ("mcp", "runner")
PARTS = ("compute", "dynamodb", "s3", "logs")
SETTINGS = {  # template.yaml's, as they bear on a request's cost
    "KILN_CATALOG_MAX_STALENESS_S": "1",
    "KILN_RUN_MEMORY_MB": "768",
    # What Lambda sets for LoggingConfig's LogFormat JSON and ApplicationLogLevel INFO.
    "AWS_LAMBDA_LOG_FORMAT": "JSON",
    "AWS_LAMBDA_LOG_LEVEL": "INFO",
}
EVENT = json.loads((ROOT / "tests" / "events" / "http-api-tools-call.json").read_text())


CALL = "tools/call, anonymous"
_CALL = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
         "params": {"name": "echo", "arguments": {"text": "hi"}}}  # fmt: skip
_LIST = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
KINDS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    CALL: (_CALL, {}),
    "tools/call through a view": (_CALL, {"path": "/mcp/v/public"}),
    # An idempotency key (kiln.protocol.idempotency): a fresh one per call (a claim, then its
    # answer kept), and one key sent again and again (each call answered from the store).
    "tools/call with a fresh idempotency key": (_CALL, {"idempotency": "fresh"}),
    "tools/call replayed by its idempotency key": (_CALL, {"idempotency": "bench-replayed"}),
    "tools/list, 100 tools": (_LIST, {}),
    "tools/list, 100 tools, gzip": (_LIST, {"gzip": True}),
}


def filler(index: int) -> dict[str, Any]:
    properties = {
        "amount": {"type": "number", "description": "The net amount, in pounds and pence."},
        "rate": {"type": "number", "description": "The VAT rate as a fraction, e.g. 0.2."},
    }
    schema = {"type": "object", "properties": properties}
    return {"name": f"vat_tool_{index:03d}", "language": "python", "input_schema": schema,
            "description": f"Adds UK VAT to a net amount (variant {index}).",
            "code": "print('x')\n"}  # fmt: skip


def seed(endpoint: str, name: str) -> None:
    from kiln.access.view_store import ViewStore
    from kiln.access.views import check_view
    from kiln.aws.clients import ensure_resources, make_clients
    from kiln.catalog.rules import check_draft
    from kiln.catalog.store import CatalogStore

    clients = make_clients(endpoint_url=endpoint, region="us-east-1")
    ensure_resources(clients, table=name, bucket=name)
    store = CatalogStore(clients.dynamodb, clients.s3, table=name, bucket=name)
    for tool in [ECHO, *(filler(i) for i in range(99))]:
        store.create(check_draft(tool), actor="bench")
    view = {"name": "public", "tools": ["echo"], "published": True, "anonymous": True}
    ViewStore(clients.dynamodb, table=name).put(check_view(view), expected_revision=None)


def event(
    message: dict[str, Any], path: str = "/mcp", gzip: bool = False, idempotency: str = ""
) -> dict[str, Any]:
    built: dict[str, Any] = copy.deepcopy(EVENT)
    built["body"] = json.dumps(message)
    built["rawPath"] = built["requestContext"]["http"]["path"] = path
    built["requestContext"]["timeEpoch"] = int(time.time() * 1000)
    built["requestContext"]["requestId"] = uuid.uuid4().hex
    if gzip:
        built["headers"]["accept-encoding"] = "gzip"
    if idempotency:
        key = uuid.uuid4().hex if idempotency == "fresh" else idempotency
        built["headers"]["idempotency-key"] = key
    return built


def units(record: dict[str, Any]) -> tuple[float, float]:
    """DynamoDB (read, write) units of one call, from its bytes as DynamoDB rounds them."""
    if record["service"] != "dynamodb":
        return 0.0, 0.0
    op, body = record["target"], record.get("body") or {}
    if op in ("GetItem", "Query", "BatchGetItem"):
        per = 1.0 if body.get("ConsistentRead") else 0.5
        return per * max(1, math.ceil(record["response_bytes"] / 4096)), 0.0
    from kiln.local.emulator.throughput import write_charges

    # Per item, as DynamoDB charges them: per 1 KB, twice for a transaction's items.
    charges = write_charges(op, body, record["request_bytes"])
    return 0.0, sum(charge for _, charge in charges)


def sample(functions: Any, log: Path) -> dict[str, Any]:
    """Where the call log and each function's CPU and log bytes stand now."""
    state: dict[str, Any] = {"calls": log.stat().st_size, "at": time.monotonic()}
    for name in FUNCTIONS:
        spend = functions.spend(name)
        state[name] = (spend.cpu_s(), spend.log_bytes(), spend.split_s(), spend.log_sizes())
    return state


def amortized(record: dict[str, Any]) -> bool:
    """A call a container makes per window, not per request: the catalog version read (once
    per KILN_CATALOG_MAX_STALENESS_S) and the ledger's day totals (once per 10 s)."""
    body = record.get("body") or {}
    pk = ((body.get("Key") or body.get("Item") or {}).get("pk") or {}).get("S", "")
    return (record["target"] == "GetItem" and pk == "CATALOG") or pk.startswith("LEDGERSUM#")


def calibration_ms() -> float:
    """CPU time of a fixed pure-Python job in this process: how fast this machine's cores
    run right now, to compare CPU figures between runs (frequency, contention)."""
    started = time.process_time()
    data = {"jsonrpc": "2.0", "id": 1, "params": {"name": "echo", "arguments": {"x": [1] * 50}}}
    for _ in range(4000):
        json.loads(json.dumps(data))
    return (time.process_time() - started) * 1000


def idle_cpu(functions: Any, seconds: float = 5.0) -> dict[str, float]:
    """CPU ms per second each function spends with no request at all (background threads)."""
    before = {name: functions.spend(name).cpu_s() for name in FUNCTIONS}
    time.sleep(seconds)
    return {name: (functions.spend(name).cpu_s() - before[name]) * 1000 / seconds
            for name in FUNCTIONS}  # fmt: skip


def _op(record: dict[str, Any]) -> str:
    return f"{record['service']}:{record['target'] or record['method']}"


def _median_ms(records: list[dict[str, Any]]) -> dict[str, float]:
    """The emulator's median time per operation: a call's wait, less the load's outliers."""
    times: dict[str, list[float]] = {}
    for record in records:
        times.setdefault(_op(record), []).append(record["elapsed_ms"])
    return {op: statistics.median(values) for op, values in times.items()}


def measure(functions: Any, log: Path, message: dict[str, Any], n: int,
            spy: Path | None = None, **kw: Any) -> dict[str, Any]:  # fmt: skip
    """n requests of one kind, one at a time: per request, what each function spent."""
    for _ in range(3):  # warm: first bundle, code and catalog reads are per container
        functions.mcp.invoke(event(message, **kw), timeout_s=30)
    with profiling(functions, spy):
        return _measured(functions, log, message, n, **kw)


def _measured(functions: Any, log: Path, message: dict[str, Any], n: int,
              **kw: Any) -> dict[str, Any]:  # fmt: skip
    before = sample(functions, log)
    invokes = len(functions.runners.served)
    walls: list[float] = []
    size = 0
    for _ in range(n):
        queued = time.perf_counter()
        answer = functions.mcp.invoke(event(message, **kw), timeout_s=30)
        walls.append((time.perf_counter() - queued) * 1000)
        if answer.kind != "response" or answer.payload.get("statusCode") != 200:
            raise SystemExit(f"bad answer: {answer.payload}")
        size += len(answer.payload.get("body") or "")
        time.sleep(0.35)  # requests spread as a container sees them, windows included
    after = sample(functions, log)
    with log.open("rb") as handle:
        handle.seek(before["calls"])
        records = [json.loads(line) for line in handle.read().splitlines() if line.strip()]
    ops = Counter(_op(r) for r in records)
    windowed = [r for r in records if amortized(r)]
    row: dict[str, Any] = {
        "ops": {op: count / n for op, count in sorted(ops.items())},
        "read_units": sum(units(r)[0] for r in records) / n,
        "write_units": sum(units(r)[1] for r in records) / n,
        "amortized_units": (sum(units(r)[0] for r in windowed) / n,
                            sum(units(r)[1] for r in windowed) / n),
        "rate": n / (after["at"] - before["at"]),  # requests a second the container served
        "s3_gets": sum(1 for r in records if r["service"] == "s3" and r["method"] == "GET") / n,
        "response_bytes": size / n, "wall_ms": sorted(walls)[n // 2],
        "runner_invokes": (len(functions.runners.served) - invokes) / n,
    }  # fmt: skip
    typical = _median_ms(records)
    for name in FUNCTIONS:
        waited = sum(typical[_op(r)] for r in records if r.get("role") == name)
        lines = functions.spend(name).log_lines(before[name][3])
        row[name] = {
            "cpu_ms": (after[name][0] - before[name][0]) * 1000 / n,
            "split_ms": {
                part: (after[name][2][part] - ms) * 1000 / n for part, ms in before[name][2].items()
            },
            "wait_ms": waited / n,
            "log_bytes": (after[name][1] - before[name][1]) / n,
            "metric_bytes": sum(len(x) for x in lines if b'"message":"metrics"' in x) / n,
        }
    return row


def steady(row: dict[str, Any], rate: float) -> dict[str, Any]:
    """The same request in a container serving `rate` requests a second: what a container
    does per window (the version read, the totals write, the metrics batch) spread over
    `rate / row["rate"]` times as many requests. Its CPU is left as measured (an overcount)."""
    share = min(1.0, row["rate"] / rate)
    reads, writes = row["amortized_units"]
    busy = copy.deepcopy(row)
    busy["read_units"] -= reads * (1 - share)
    busy["write_units"] -= writes * (1 - share)
    metrics = row["mcp"]["metric_bytes"]
    busy["mcp"]["log_bytes"] -= metrics * (1 - share)
    return busy


def durations(row: dict[str, Any], memory: dict[str, int]) -> dict[str, float]:
    """Each function's billed ms per request, priced on CPU time and waits (see --help)."""
    runner = 0.0
    if row["runner_invokes"]:
        spent = row["runner"]
        runner = spent["cpu_ms"] * max(1.0, FULL_VCPU_MB / memory["runner"]) + spent["wait_ms"]
        runner = runner / row["runner_invokes"]
    mcp = row["mcp"]["cpu_ms"] * max(1.0, FULL_VCPU_MB / memory["mcp"]) + row["mcp"]["wait_ms"]
    if row["runner_invokes"]:
        mcp += row["runner_invokes"] * (runner + INVOKE_MS)  # mcp waits on the runner's answer
    return {"mcp": mcp, "runner": runner}


def cost(
    row: dict[str, Any], arch: str, memory: dict[str, int], platform_log: int
) -> dict[str, float]:
    """$ per million requests, by part."""
    ms = durations(row, memory)
    compute = sum(ms[f] / 1000 * memory[f] / 1024 * LAMBDA_GB_S[arch] for f in FUNCTIONS)
    invocations = 1 + row["runner_invokes"]
    log_bytes = sum(row[f]["log_bytes"] for f in FUNCTIONS) + invocations * platform_log
    parts = {
        "compute": compute + invocations * LAMBDA_REQUEST,
        "dynamodb": row["read_units"] * DDB_READ_UNIT + row["write_units"] * DDB_WRITE_UNIT,
        "s3": row["s3_gets"] * S3_GET,
        "logs": log_bytes / 2**30 * LOGS_GB,
    }
    parts = {part: dollars * 1e6 for part, dollars in parts.items()}
    return {**parts, "total": sum(parts.values()), "log_bytes": log_bytes}


def report(rows: dict[str, dict[str, Any]], memory: dict[str, int], platform_log: int) -> None:
    print("| request | AWS calls per request | RRU | WRU | response B | log B | mcp CPU ms "
          "| mcp waits ms | runner CPU ms | wall ms | billed ms (mcp+runner) "
          "| $/M x86_64 | $/M arm64 | egress $/M |")  # fmt: skip
    print("| --- " * 14 + "|")
    for kind, row in rows.items():
        ops = ", ".join(f"{count:g} {op}" for op, count in row["ops"].items()) or "none"
        ms = durations(row, memory)
        x86, arm = (cost(row, arch, memory, platform_log) for arch in ("x86_64", "arm64"))
        egress = row["response_bytes"] / 2**30 * EGRESS_GB * 1e6
        print(f"| {kind} | {ops} | {row['read_units']:.2f} | {row['write_units']:.2f} "
              f"| {row['response_bytes']:.0f} | {x86['log_bytes']:.0f} "
              f"| {row['mcp']['cpu_ms']:.1f} | {row['mcp']['wait_ms']:.1f} "
              f"| {row['runner']['cpu_ms']:.1f} | {row['wall_ms']:.1f} "
              f"| {ms['mcp']:.1f}+{ms['runner']:.1f} | {x86['total']:.2f} | {arm['total']:.2f} "
              f"| {egress:.2f} |")  # fmt: skip
    call = rows[CALL]
    for arch in ("x86_64", "arm64"):
        parts = cost(call, arch, memory, platform_log)
        shown = ", ".join(f"{part} ${parts[part]:.3f}" for part in PARTS)
        print(f"{CALL}, {arch}: {shown}; total ${parts['total']:.2f}/M")
    for name in FUNCTIONS:
        split = ", ".join(f"{part} {ms:.1f}" for part, ms in call[name]["split_ms"].items())
        print(
            f"{CALL}: {name} CPU ms per call by where it ran: {split}; log "
            f"{call[name]['log_bytes']:.0f} B, of it metrics {call[name]['metric_bytes']:.0f} B"
        )
    reads, writes = call["amortized_units"]
    print(
        f"{CALL}: per-window units (version read, day totals) {reads:.2f} RRU + "
        f"{writes:.2f} WRU a call at {call['rate']:.1f} requests/s per container"
    )


def report_steady(rows: dict[str, dict[str, Any]], memory: dict[str, int], platform_log: int,
                  rate: float) -> None:  # fmt: skip
    """The anonymous call in a busy container (its per-window costs spread thinner)."""
    busy = steady(rows[CALL], rate)
    for arch in ("x86_64", "arm64"):
        parts = cost(busy, arch, memory, platform_log)
        shown = ", ".join(f"{part} ${parts[part]:.3f}" for part in PARTS)
        print(
            f"{CALL} in a container serving {rate:g}/s (steady state; CPU as measured), "
            f"{arch}: {shown}; total ${parts['total']:.2f}/M "
            f"(RRU {busy['read_units']:.3f}, WRU {busy['write_units']:.3f}, "
            f"log {parts['log_bytes']:.0f} B)"
        )


def sweep(rows: dict[str, dict[str, Any]], platform_log: int) -> None:
    """The anonymous tools/call at other memory sizes: what each choice costs and takes."""
    print("| mcp MB | runner MB | billed ms (mcp+runner) | $/M x86_64 | $/M arm64 |")
    print("| --- | --- | --- | --- | --- |")
    for mcp_mb in (256, 512, 1024, 1769):
        for runner_mb in (1024, 2048):
            memory = {"mcp": mcp_mb, "runner": runner_mb}
            ms = durations(rows[CALL], memory)
            x86, arm = (cost(rows[CALL], a, memory, platform_log)["total"] for a in LAMBDA_GB_S)
            print(f"| {mcp_mb} | {runner_mb} | {ms['mcp']:.1f}+{ms['runner']:.1f} "
                  f"| {x86:.2f} | {arm:.2f} |")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--only", default="", help="measure the kinds whose name holds this")
    parser.add_argument("--mcp-mb", type=int, default=MEMORY["mcp"])
    parser.add_argument("--runner-mb", type=int, default=MEMORY["runner"])
    parser.add_argument("--text-logs", action="store_true",
                        help="price Lambda's START/END/REPORT lines (LogFormat Text)")  # fmt: skip
    parser.add_argument("--show-logs", action="store_true", help="print each function's last lines")
    parser.add_argument(
        "--rate",
        type=float,
        default=10.0,
        help="requests a second of a busy container, for the steady state",
    )
    parser.add_argument(
        "--py-spy",
        type=Path,
        default=None,
        help="profile each function's processes with py-spy during the "
        "anonymous tools/call into this folder (raw, for flamegraphs)",
    )
    args = parser.parse_args()
    memory = {"mcp": args.mcp_mb, "runner": args.runner_mb}
    platform_log = PLATFORM_TEXT_BYTES if args.text_logs else 0
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    from kiln.local.emulator import run_emulator
    from kiln.local.emulator.privacy import write_private

    with tempfile.TemporaryDirectory() as raw:
        tmp = Path(raw)
        state = tmp / "emulator"
        state.mkdir()
        key = {"access_key_id": "testing", "secret_access_key": "testing"}
        write_private(state / "credentials.json", json.dumps(key).encode())
        log = tmp / "calls.jsonl"
        with run_emulator(state, call_log=log) as endpoint:
            name = f"kiln-cost-{uuid.uuid4().hex[:8]}"
            seed(endpoint.url, name)
            calibrated = [calibration_ms()]
            with lambdas.functions(tmp, endpoint.url, name, SETTINGS) as functions:
                rows = {}
                for kind, (message, kw) in KINDS.items():
                    if args.only not in kind:
                        continue
                    spy = args.py_spy if kind == CALL else None
                    rows[kind] = measure(functions, log, message, args.requests, spy, **kw)
                idle = idle_cpu(functions)
                peaks = {f: functions.spend(f).peak_rss_mb() for f in FUNCTIONS}
                if args.show_logs:
                    for env in [functions.mcp, *functions.runners.environments.values()]:
                        print(f"--- {env.handler}'s last lines:\n{env.log()[-700:]}")
    print(f"load: {os.getloadavg()[0]:.1f} (1 min); prices: us-east-1 list, {PRICES_DATE}; "
          f"mcp {memory['mcp']} MB, runner {memory['runner']} MB (peak RSS "
          f"{peaks['mcp']:.0f} and {peaks['runner']:.0f} MB); front door (HTTP API, $1.00/M) "
          f"excluded; platform log lines {platform_log} B per invocation")  # fmt: skip
    calibrated.append(calibration_ms())
    print(
        f"calibration: a fixed job took {calibrated[0]:.0f} and {calibrated[1]:.0f} ms of CPU "
        "(before and after); idle CPU ms a second: "
        + ", ".join(f"{name} {ms:.2f}" for name, ms in idle.items())
    )
    report(rows, memory, platform_log)
    report_steady(rows, memory, platform_log, args.rate)
    sweep(rows, platform_log)
    return 0


@contextlib.contextmanager
def profiling(functions: Any, folder: Path | None) -> Iterator[None]:
    """py-spy on each function's runtime process (and what it forks) while the block runs."""
    if folder is None:
        yield
        return
    folder.mkdir(parents=True, exist_ok=True)
    spies = []
    for name in FUNCTIONS:
        for pid in functions.spend(name).runtimes():
            out = folder / f"{name}-{pid}.txt"
            spies.append(subprocess.Popen(
                ["py-spy", "record", "--pid", str(pid), "--subprocesses", "--rate", "1000", "--gil",
                 "--format", "raw", "--output", str(out), "--nonblocking"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            ))  # fmt: skip
    time.sleep(1.0)  # attached
    try:
        yield
    finally:
        for spy in spies:
            spy.send_signal(signal.SIGINT)
            spy.wait(timeout=60)


if __name__ == "__main__":
    raise SystemExit(main())
