"""Which DynamoDB item throttles first, and at what rate: the public function's real handler
driven from many simulated Lambda containers against the emulator's per-partition limits.

Each simulated container is a process that imports `kiln.lambda_handlers` and calls its
`mcp` handler with HTTP API v2 events, one request at a time, as a Lambda container does
(the tool runs in the container: the runner hop touches no DynamoDB item). The emulator
enforces DynamoDB's per-partition limits (3,000 read and 1,000 write units a second,
kiln.local.emulator.throughput) and logs each refusal and each window's busiest partitions.

This machine cannot offer 10,000 requests a second, so time is scaled by a factor F:

- the emulator's limits are divided by F (counted over a window of `--window` seconds, so a
  partition's few units a second are not rounded to all or nothing), and the offered rate is
  divided by F: an item that takes u units per request meets its limit at the same
  full-scale rate;
- `--containers` simulated containers stand for `--full-containers` real ones (the template's
  `PublicConcurrency`, 200): each stands for k = full/simulated containers, so what a
  container does per unit of time (read the catalog version once per
  KILN_CATALOG_MAX_STALENESS_S, write its ledger totals once per KILN_LEDGER_TOTALS_FLUSH_S,
  claim quota about once per KILN_QUOTA_CLAIM_HORIZON_S) has those intervals multiplied by
  D = F / k, so that their sum over the containers is also divided by F. Intervals Kiln does
  not expose (a key's cache, its last-used stamp) are not stretched: their items are shown
  D times busier than they would be (conservative).

Per request type it prints, for each offered rate (full-scale equivalent = real x F), the
rate reached, the partitions refused (the first to throttle) and the busiest partition of any
window as a share of its limit; where nothing throttled, the rate at which the busiest would
(reached rate / share) is an extrapolation, and is labelled so.

usage: python -m bench.throughput.run [--factor 500] [--containers 10] [--rates 10000,20000]
"""

from __future__ import annotations

import argparse
import copy
import json
import multiprocessing
import os
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from tests.support.tools import ECHO

ROOT = Path(__file__).resolve().parents[2]

READ_LIMIT, WRITE_LIMIT = 3000.0, 1000.0  # DynamoDB, per partition and second
EVENT = json.loads((ROOT / "tests" / "events" / "http-api-tools-call.json").read_text())
CALL = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": "hi"}}}  # fmt: skip
LIST = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
KINDS = {  # request type -> (path, message, with the quota key)
    "tools/call anonymous": ("/mcp", CALL, False),
    "tools/call through a view": ("/mcp/v/public", CALL, False),
    "tools/call with a key quota": ("/mcp", CALL, True),
    "tools/list": ("/mcp", LIST, False),
}


def seed(endpoint: str, name: str) -> str:
    """The catalog (echo and 19 more), a public view, and a key with both quotas."""
    from kiln.access.quotas import Quota
    from kiln.access.view_store import ViewStore
    from kiln.access.views import check_view
    from kiln.aws.clients import ensure_resources, make_clients
    from kiln.catalog.rules import check_draft
    from kiln.catalog.store import CatalogStore
    from kiln.identity.keys import KeyStore

    clients = make_clients(endpoint_url=endpoint, region="us-east-1")
    ensure_resources(clients, table=name, bucket=name)
    store = CatalogStore(clients.dynamodb, clients.s3, table=name, bucket=name)
    for index in range(20):
        tool = ECHO if index == 0 else {**ECHO, "name": f"echo_{index:02d}"}
        store.create(check_draft(tool), actor="bench")
    view = {"name": "public", "tools": ["echo"], "published": True, "anonymous": True}
    ViewStore(clients.dynamodb, table=name).put(check_view(view), expected_revision=None)
    quota = Quota(calls_per_minute=1_000_000, run_seconds_per_day=86_400_000.0)
    _, secret = KeyStore(clients.dynamodb, table=name).create("busy", "call", quota=quota)
    return secret


class Context:
    """What the handler reads of a Lambda context."""

    function_name = "kiln-throughput-mcp"
    memory_limit_in_mb = 1024
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:kiln-throughput-mcp"

    def __init__(self) -> None:
        self.aws_request_id = uuid.uuid4().hex
        self._deadline = time.monotonic() + 30

    def get_remaining_time_in_millis(self) -> int:
        return int((self._deadline - time.monotonic()) * 1000)


def event(kind: str, key: str) -> dict[str, Any]:
    path, message, keyed = KINDS[kind]
    built = copy.deepcopy(EVENT)
    built["body"] = json.dumps(message)
    built["rawPath"] = built["requestContext"]["http"]["path"] = path
    built["requestContext"]["timeEpoch"] = int(time.time() * 1000)
    built["requestContext"]["requestId"] = uuid.uuid4().hex
    if keyed:
        built["headers"]["authorization"] = f"Bearer {key}"
    return built


def outcome(answer: dict[str, Any]) -> str:
    if answer.get("statusCode") != 200:
        return f"HTTP {answer.get('statusCode')}"
    body = json.loads(answer.get("body") or "{}")
    if "error" in body:
        return f"error {body['error'].get('code')}: {body['error'].get('message', '')[:60]}"
    if body.get("result", {}).get("isError"):
        text = body["result"].get("content", [{}])[0].get("text", "")
        return f"tool error: {text[:60]}"
    return "ok"


def container(conn: Any, env: dict[str, str]) -> None:
    """One simulated container: its own process, its own handler, one request at a time."""
    os.environ.update(env)
    log = os.open(env["KILN_BENCH_LOG"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(log, 1)  # the handler's log lines: one file for every container
    os.dup2(log, 2)
    import kiln.lambda_handlers as handlers

    handler = handlers.mcp
    while True:
        order = conn.recv()
        if order is None:
            return
        kind, key, count, interval, start = order
        outcomes: Counter[str] = Counter()
        late = 0.0
        for index in range(count):
            due = start + index * interval
            wait = due - time.time()
            if wait > 0:
                time.sleep(wait)
            else:
                late = max(late, -wait)
            outcomes[outcome(handler(event(kind, key), Context()))] += 1
        conn.send({"outcomes": dict(outcomes), "late_s": late, "ended": time.time()})


def window_records(log: Path, since: float, until: float, window_s: float) -> list[dict[str, Any]]:
    records = []
    if log.exists():
        for line in log.read_text().splitlines():
            record = json.loads(line)
            at = record["at"] if "at" in record else record["window"] * window_s
            if since <= at < until:
                records.append(record)
    return records


def step(
    pipes: list[Any], kind: str, key: str, rate_eq: float, args: Any, log: Path
) -> dict[str, Any]:
    """Offer `rate_eq` (full-scale) of one request type for `args.seconds`; what happened."""
    real = rate_eq / args.factor
    per = real / len(pipes)
    count = max(1, int(per * args.seconds))
    start = time.time() + 1.0
    for index, pipe in enumerate(pipes):  # staggered, as independent callers are
        pipe.send((kind, key, count, 1 / per, start + index / real))
    answers = [pipe.recv() for pipe in pipes]
    ended = max(answer["ended"] for answer in answers)
    outcomes: Counter[str] = Counter()
    for answer in answers:
        outcomes.update(answer["outcomes"])
    records = window_records(log, start, ended, args.window)
    throttled = Counter(r["throttled"] for r in records if "throttled" in r)
    busiest: tuple[float, str, str] = (0.0, "", "")
    for record in records:
        for kind_, found in record.get("busiest", {}).items():
            limit = (READ_LIMIT if kind_ == "read" else WRITE_LIMIT) / args.factor * args.window
            for spent, pk in found:
                busiest = max(busiest, (spent / limit, pk, kind_))
    reached = sum(outcomes.values()) / (ended - start) * args.factor
    return {"offered": rate_eq, "reached": reached, "outcomes": dict(outcomes),
            "throttled": dict(throttled), "busiest": busiest,
            "late_s": max(a["late_s"] for a in answers)}  # fmt: skip


def environment(endpoint: str, name: str, tmp: Path, index: int, dilation: float) -> dict[str, str]:
    return {
        "HOME": str(tmp),
        "AWS_LAMBDA_FUNCTION_NAME": "kiln-throughput-mcp",
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "1024",
        "AWS_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "kiln-role/mcp",
        "AWS_ENDPOINT_URL": endpoint,
        "KILN_TABLE": name,
        "KILN_BUCKET": name,
        "KILN_PUBLIC_ANONYMOUS": "true",
        "KILN_BUNDLE_CACHE_DIR": str(tmp / f"bundles-{index}"),
        "KILN_LEDGER_DIGEST_KEY": "bench-digest-key-0123456789abcdef",
        "KILN_RUN_STANDBY": "1",
        "KILN_BENCH_LOG": str(tmp / "containers.log"),
        "POWERTOOLS_SERVICE_NAME": "kiln",
        "POWERTOOLS_LOG_LEVEL": "WARNING",
        # what a container does per unit of time, stretched by D (see the docstring)
        "KILN_CATALOG_MAX_STALENESS_S": str(1.0 * dilation),  # as template.yaml: 1 s
        "KILN_LEDGER_TOTALS_FLUSH_S": str(10.0 * dilation),
        "KILN_QUOTA_CLAIM_HORIZON_S": str(1.0 * dilation),
    }


def report(kind: str, rows: list[dict[str, Any]]) -> None:
    print(f"\n### {kind}")
    print("| offered /s (full scale) | reached /s | outcomes | partitions refused | busiest "
          "partition (share of its limit) |")  # fmt: skip
    print("| --- | --- | --- | --- | --- |")
    for row in rows:
        share, pk, unit = row["busiest"]
        refused = ", ".join(f"`{pk}` x{n}" for pk, n in row["throttled"].items()) or "none"
        outcomes = ", ".join(f"{n} {what}" for what, n in row["outcomes"].items())
        print(f"| {row['offered']:,.0f} | {row['reached']:,.0f} | {outcomes} | {refused} "
              f"| `{pk}` {unit}s {share:.0%} |")  # fmt: skip
    first = next((row for row in rows if row["throttled"]), None)
    if first is not None:
        pk = max(first["throttled"], key=first["throttled"].get)
        print(f"first to throttle: `{pk}`, at {first['reached']:,.0f}/s (measured)")
    else:
        share, pk, unit = max(row["busiest"] for row in rows)
        top = max(rows, key=lambda row: row["reached"])
        rate = top["reached"] / top["busiest"][0] if top["busiest"][0] else float("inf")
        print(f"nothing throttled up to {top['reached']:,.0f}/s; the busiest partition, "
              f"`{top['busiest'][1]}` ({top['busiest'][2]}s), would at about {rate:,.0f}/s "
              "(extrapolated from its share of its limit)")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--factor", type=float, default=500.0, help="F: time scale")
    parser.add_argument("--containers", type=int, default=10)
    parser.add_argument("--full-containers", type=int, default=200)
    parser.add_argument("--window", type=float, default=20.0, help="seconds per limit window")
    parser.add_argument("--seconds", type=float, default=45.0, help="per step")
    parser.add_argument("--rates", default="10000,20000", help="full-scale requests/s to offer")
    parser.add_argument("--kinds", default=",".join(KINDS), help="request types, comma-separated")
    args = parser.parse_args()
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    from kiln.local.emulator import run_emulator
    from kiln.local.emulator.privacy import write_private

    dilation = args.factor * args.containers / args.full_containers
    limits = f"{READ_LIMIT / args.factor:g}/{WRITE_LIMIT / args.factor:g}"
    print(f"F = {args.factor:g}: partition limits {limits} units/s over {args.window:g} s "
          f"windows; {args.containers} containers stand for {args.full_containers} "
          f"(D = {dilation:g}); load {os.getloadavg()[0]:.1f} (1 min) at start")  # fmt: skip
    rates = [float(rate) for rate in args.rates.split(",")]
    with tempfile.TemporaryDirectory() as raw:
        tmp = Path(raw)
        state = tmp / "emulator"
        state.mkdir()
        key = {"access_key_id": "testing", "secret_access_key": "testing"}
        write_private(state / "credentials.json", json.dumps(key).encode())
        log = tmp / "throughput.jsonl"
        name = f"kiln-tp-{uuid.uuid4().hex[:8]}"
        with run_emulator(state) as endpoint:  # set up without limits; the state is kept
            secret = seed(endpoint.url, name)
        with run_emulator(state, partition_limits=limits, partition_window_s=args.window,
                          throughput_log=log) as endpoint:  # fmt: skip
            spawn = multiprocessing.get_context("spawn")
            pipes, processes = [], []
            for index in range(args.containers):
                ours, theirs = spawn.Pipe()
                env = environment(endpoint.url, name, tmp, index, dilation)
                process = spawn.Process(target=container, args=(theirs, env), daemon=True)
                process.start()
                theirs.close()  # a container that dies is then an EOFError here, not a hang
                pipes.append(ours)
                processes.append(process)
            try:
                for kind in args.kinds.split(","):  # warm: each container's first requests
                    for pipe in pipes:
                        pipe.send((kind, secret, 2, 0.0, time.time()))
                    [pipe.recv() for pipe in pipes]
                for kind in args.kinds.split(","):
                    rows = [step(pipes, kind, secret, rate, args, log) for rate in rates]
                    report(kind, rows)
            finally:
                for pipe, process in zip(pipes, processes, strict=True):
                    if process.is_alive():
                        pipe.send(None)
                    process.join(timeout=10)
                if any(process.exitcode for process in processes):
                    codes = [process.exitcode for process in processes]
                    print(f"container exit codes: {codes}")
                    lines = (tmp / "containers.log").read_text().splitlines()
                    print("a container failed; the last of their log:", *lines[-30:], sep="\n")
    print(f"\nload {os.getloadavg()[0]:.1f} (1 min) at the end")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
