"""What one request costs: the AWS calls Kiln's public function makes, measured, priced.

The public function runs as Lambda runs it (`python -m awslambdaric kiln.lambda_handlers.mcp`,
fed HTTP API v2 events by tests/e2e/runtime_api.py, with template.yaml's catalog staleness
window) against the local emulator, whose call log (`--call-log`, kiln.local.emulator.calllog)
records every AWS request it makes: operation, request and response bytes. Per request
type the script prints the calls by operation, DynamoDB units (from item bytes, as DynamoDB
rounds them: reads per 4 KB, half for eventually consistent ones; writes per 1 KB), the
response bytes, the function's log bytes, the measured handler time, and the cost per million
requests at list prices, for x86_64 and arm64. The front door (the HTTP API, $1.00 per
million) is left out, as the goal says; egress is listed apart.

usage: python bench/cost/run.py [--requests 40] [--memory-mb 1024]
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

from tests.e2e.runtime_api import RuntimeApi  # noqa: E402

# us-east-1 list prices, as published on 2026-12-01.
PRICES_DATE = "2026-12-01"
LAMBDA_GB_S = {"x86_64": 0.0000166667, "arm64": 0.0000133334}
LAMBDA_REQUEST = 0.20 / 1e6
DDB_READ_UNIT = 0.125 / 1e6  # on-demand read request unit
DDB_WRITE_UNIT = 0.625 / 1e6  # on-demand write request unit
S3_GET = 0.0004 / 1000
LOGS_GB = 0.50  # CloudWatch Logs ingestion (standard class)
EGRESS_GB = 0.09
EVENT = json.loads((ROOT / "tests" / "events" / "http-api-tools-call.json").read_text())
ECHO = {
    "name": "echo",
    "description": "Echo the given text back.",
    "language": "python",
    "code": "import json,sys\nprint(json.load(sys.stdin)['text'])\n",
    "input_schema": {"type": "object", "properties": {"text": {"type": "string"}}},
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
    built = copy.deepcopy(EVENT)
    built["body"] = json.dumps(message)
    built["rawPath"] = built["requestContext"]["http"]["path"] = path
    built["requestContext"]["timeEpoch"] = int(time.time() * 1000)
    built["requestContext"]["requestId"] = uuid.uuid4().hex
    if gzip:
        built["headers"]["accept-encoding"] = "gzip"
    return built


@contextmanager
def function(endpoint: str, name: str, tmp: Path, output: Path) -> Iterator[Any]:
    with RuntimeApi() as api, output.open("wb") as sink:
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(tmp),
            "PYTHONPATH": str(ROOT / "functions"),
            "AWS_LAMBDA_RUNTIME_API": api.address,
            "AWS_LAMBDA_FUNCTION_NAME": "kiln-cost-mcp",
            "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "1024",
            "AWS_REGION": "us-east-1",
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_SESSION_TOKEN": "kiln-role/mcp",
            "AWS_ENDPOINT_URL": endpoint,
            "KILN_TABLE": name,
            "KILN_BUCKET": name,
            "KILN_PUBLIC_ANONYMOUS": "true",
            "KILN_BUNDLE_CACHE_DIR": str(tmp / "bundles"),
            "KILN_CATALOG_MAX_STALENESS_S": "1",  # as template.yaml
            "KILN_LEDGER_DIGEST_KEY": "bench-digest-key-0123456789abcdef",
            "POWERTOOLS_SERVICE_NAME": "kiln",
        }
        process = subprocess.Popen(
            [sys.executable, "-m", "awslambdaric", "kiln.lambda_handlers.mcp"],
            env=env, cwd=tmp, stdout=sink, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            api.wait_ready(120, alive=lambda: process.poll() is None)
            yield api
        finally:
            process.kill()
            process.wait(timeout=10)


def units(record: dict[str, Any]) -> tuple[float, float]:
    """DynamoDB (read, write) units of one call, from its bytes as DynamoDB rounds them."""
    if record["service"] != "dynamodb":
        return 0.0, 0.0
    op, body = record["target"], record.get("body") or {}
    if op in ("GetItem", "Query", "BatchGetItem"):
        per = 1.0 if body.get("ConsistentRead") else 0.5
        return per * max(1, math.ceil(record["response_bytes"] / 4096)), 0.0
    if op == "TransactWriteItems":
        return 0.0, 2.0 * max(1, math.ceil(record["request_bytes"] / 1024))
    return 0.0, float(max(1, math.ceil(record["request_bytes"] / 1024)))


def measure(api: Any, log: Path, output: Path, message: dict[str, Any], n: int,
            **kw: Any) -> dict[str, Any]:  # fmt: skip
    for _ in range(3):  # warm: first bundle, code and catalog reads are per container
        api.invoke(event(message, **kw), timeout_s=30)
    start, log_start = log.stat().st_size, output.stat().st_size
    times: list[float] = []
    size = 0
    for _ in range(n):
        queued = time.perf_counter()
        answer = api.invoke(event(message, **kw), timeout_s=30)
        times.append((time.perf_counter() - queued) * 1000)
        if answer.kind != "response" or answer.payload.get("statusCode") != 200:
            raise SystemExit(f"bad answer: {answer.payload}")
        size += len(answer.payload.get("body") or "")
        time.sleep(0.35)  # requests spread as a container sees them, windows included
    with log.open("rb") as handle:
        handle.seek(start)
        records = [json.loads(line) for line in handle.read().splitlines() if line.strip()]
    ops = Counter(f"{r['service']}:{r['target'] or r['method']}" for r in records)
    reads = sum(units(r)[0] for r in records)
    writes = sum(units(r)[1] for r in records)
    s3_gets = sum(1 for r in records if r["service"] == "s3" and r["method"] == "GET")
    return {
        "ops": {op: count / n for op, count in sorted(ops.items())},
        "read_units": reads / n, "write_units": writes / n, "s3_gets": s3_gets / n,
        "response_bytes": size / n, "log_bytes": (output.stat().st_size - log_start) / n,
        "handler_ms": sorted(times)[len(times) // 2],
    }  # fmt: skip


def cost(row: dict[str, Any], arch: str, memory_mb: int) -> float:
    compute = row["handler_ms"] / 1000 * memory_mb / 1024 * LAMBDA_GB_S[arch] + LAMBDA_REQUEST
    store = row["read_units"] * DDB_READ_UNIT + row["write_units"] * DDB_WRITE_UNIT
    logs = row["log_bytes"] / 2**30 * LOGS_GB
    return (compute + store + row["s3_gets"] * S3_GET + logs) * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--memory-mb", type=int, default=1024)
    args = parser.parse_args()
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    from kiln.local.emulator import run_emulator
    from kiln.local.emulator.privacy import write_private

    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": "hi"}}}  # fmt: skip
    listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    kinds = {
        "tools/call, anonymous": (call, {}),
        "tools/call through a view": (call, {"path": "/mcp/v/public"}),
        "tools/list, 100 tools": (listing, {}),
        "tools/list, 100 tools, gzip": (listing, {"gzip": True}),
    }
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
            output = tmp / "function.log"
            with function(endpoint.url, name, tmp, output) as api:
                rows = {kind: measure(api, log, output, message, args.requests, **kw)
                        for kind, (message, kw) in kinds.items()}  # fmt: skip
    print(f"load: {os.getloadavg()[0]:.1f} (1 min); prices: us-east-1 list, {PRICES_DATE}; "
          f"{args.memory_mb} MB; front door (HTTP API, $1.00/M) excluded")  # fmt: skip
    print("| request | AWS calls per request | RRU | WRU | response B | log B | handler ms "
          "| $/M x86_64 | $/M arm64 | egress $/M |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for kind, row in rows.items():
        ops = ", ".join(f"{count:g} {op}" for op, count in row["ops"].items()) or "none"
        egress = row["response_bytes"] / 2**30 * EGRESS_GB * 1e6
        print(f"| {kind} | {ops} | {row['read_units']:.2f} | {row['write_units']:.2f} "
              f"| {row['response_bytes']:.0f} | {row['log_bytes']:.0f} | {row['handler_ms']:.1f} "
              f"| {cost(row, 'x86_64', args.memory_mb):.2f} "
              f"| {cost(row, 'arm64', args.memory_mb):.2f} | {egress:.2f} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
