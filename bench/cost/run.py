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

usage: python bench/cost/run.py [--requests 40] [--mcp-mb 512] [--runner-mb 2048] [--text-logs]
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import statistics
import tempfile
import time
import uuid
from collections import Counter
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
    from kiln.access.views import ViewStore, check_view
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


def event(message: dict[str, Any], path: str = "/mcp", gzip: bool = False) -> dict[str, Any]:
    built: dict[str, Any] = copy.deepcopy(EVENT)
    built["body"] = json.dumps(message)
    built["rawPath"] = built["requestContext"]["http"]["path"] = path
    built["requestContext"]["timeEpoch"] = int(time.time() * 1000)
    built["requestContext"]["requestId"] = uuid.uuid4().hex
    if gzip:
        built["headers"]["accept-encoding"] = "gzip"
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
    state: dict[str, Any] = {"calls": log.stat().st_size}
    for name in FUNCTIONS:
        spend = functions.spend(name)
        state[name] = (spend.cpu_s(), spend.log_bytes())
    return state


def _op(record: dict[str, Any]) -> str:
    return f"{record['service']}:{record['target'] or record['method']}"


def _median_ms(records: list[dict[str, Any]]) -> dict[str, float]:
    """The emulator's median time per operation: a call's wait, less the load's outliers."""
    times: dict[str, list[float]] = {}
    for record in records:
        times.setdefault(_op(record), []).append(record["elapsed_ms"])
    return {op: statistics.median(values) for op, values in times.items()}


def measure(functions: Any, log: Path, message: dict[str, Any], n: int,
            **kw: Any) -> dict[str, Any]:  # fmt: skip
    """n requests of one kind, one at a time: per request, what each function spent."""
    for _ in range(3):  # warm: first bundle, code and catalog reads are per container
        functions.mcp.invoke(event(message, **kw), timeout_s=30)
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
    row: dict[str, Any] = {
        "ops": {op: count / n for op, count in sorted(ops.items())},
        "read_units": sum(units(r)[0] for r in records) / n,
        "write_units": sum(units(r)[1] for r in records) / n,
        "s3_gets": sum(1 for r in records if r["service"] == "s3" and r["method"] == "GET") / n,
        "response_bytes": size / n, "wall_ms": sorted(walls)[n // 2],
        "runner_invokes": (len(functions.runners.served) - invokes) / n,
    }  # fmt: skip
    typical = _median_ms(records)
    for name in FUNCTIONS:
        waited = sum(typical[_op(r)] for r in records if r.get("role") == name)
        row[name] = {
            "cpu_ms": (after[name][0] - before[name][0]) * 1000 / n,
            "wait_ms": waited / n,
            "log_bytes": (after[name][1] - before[name][1]) / n,
        }
    return row


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
    parser.add_argument("--mcp-mb", type=int, default=MEMORY["mcp"])
    parser.add_argument("--runner-mb", type=int, default=MEMORY["runner"])
    parser.add_argument("--text-logs", action="store_true",
                        help="price Lambda's START/END/REPORT lines (LogFormat Text)")  # fmt: skip
    parser.add_argument("--show-logs", action="store_true", help="print each function's last lines")
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
            with lambdas.functions(tmp, endpoint.url, name, SETTINGS) as functions:
                rows = {kind: measure(functions, log, message, args.requests, **kw)
                        for kind, (message, kw) in KINDS.items()}  # fmt: skip
                peaks = {f: functions.spend(f).peak_rss_mb() for f in FUNCTIONS}
                if args.show_logs:
                    for env in [functions.mcp, *functions.runners.environments.values()]:
                        print(f"--- {env.handler}'s last lines:\n{env.log()[-700:]}")
    print(f"load: {os.getloadavg()[0]:.1f} (1 min); prices: us-east-1 list, {PRICES_DATE}; "
          f"mcp {memory['mcp']} MB, runner {memory['runner']} MB (peak RSS "
          f"{peaks['mcp']:.0f} and {peaks['runner']:.0f} MB); front door (HTTP API, $1.00/M) "
          f"excluded; platform log lines {platform_log} B per invocation")  # fmt: skip
    report(rows, memory, platform_log)
    sweep(rows, platform_log)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
