"""Every REST read with a small and with a large call ledger: the cost must not grow with it.

Run: python -m bench.load.rest_reads [--small 100] [--large 100000]

Starts `kiln dev` (a real child process, its own emulator), makes a few tools, a key, a view
and a bundle-less catalog, then seeds ledger entries straight into the emulator (BatchWriteItem
of entries as `CallLedger.item` makes them; one more through `CallLedger.write`, so the day's
totals item exists too) and times each REST
read. Two servers run side by side, one with the small ledger and one with the large, and
each read is asked of them in turn (`--repeat` times each), so the machine's load weighs on
both alike. Prints each read's medians and their ratio; goal: at most 1.5x.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config

from kiln.accounting.ledger import CallLedger, CallRecord
from tests.support.devserver import start_dev, stop

READS = (
    ("tools", "/api/tools"),
    ("tool", "/api/tools/t0"),
    ("keys", "/api/keys"),
    ("views", "/api/views"),
    ("bundles", "/api/bundles"),
    ("calls", "/api/calls?limit=50"),
    ("calls?tool", "/api/calls?limit=50&tool=t1"),
    ("totals", "/api/calls/totals"),
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def emulator_client(state_dir: Path) -> Any:
    creds = json.loads((state_dir / "credentials.json").read_text())
    url = json.loads((state_dir / "endpoint.json").read_text())["url"]
    return boto3.client(
        "dynamodb", endpoint_url=url, region_name="us-east-1",
        aws_access_key_id=creds["access_key_id"], aws_secret_access_key=creds["secret_access_key"],
        config=Config(retries={"max_attempts": 2}, read_timeout=120),
    )  # fmt: skip


def seed(db: Any, count: int, *, table: str = "kiln") -> None:
    """`count` ledger entries of today (spread over the past hour), through the emulator."""
    ledger = CallLedger(db, table=table, digest_key=b"bench")
    now = time.time()
    batch: list[dict[str, Any]] = []
    for i in range(count):
        record = CallRecord(at="", caller=f"key:k{i % 7}", tool=f"t{i % 5}", outcome="ok",
                            revision=1, duration_ms=12.5, output_bytes=40)  # fmt: skip
        batch.append(ledger.item(record, started=now - 3600 + i * 3600 / max(count, 1))[0])
        if len(batch) >= 24 or i == count - 1:
            db.batch_write_item(
                RequestItems={table: [{"PutRequest": {"Item": it}} for it in batch]}
            )
            batch = []
    record = CallRecord(at="", caller="key:k0", tool="t0", outcome="ok")
    ledger.write(ledger.item(record)[0])


def time_reads(small: Any, large: Any, repeat: int) -> dict[str, tuple[float, float]]:
    """Median seconds of each read on the two servers, asked in turn (the machine's load
    weighs on both alike)."""
    found: dict[str, tuple[float, float]] = {}
    for name, path in READS:
        samples: tuple[list[float], list[float]] = ([], [])
        for i in range(repeat * 2):
            dev = (small, large)[i % 2]
            t0 = time.perf_counter()
            answer = dev.api("GET", path)
            samples[i % 2].append(time.perf_counter() - t0)
            if answer.status_code != 200:
                print(f"{path}: {answer.status_code} {answer.text[:200]}")
                samples[i % 2][-1] = float("inf")
        found[name] = (statistics.median(samples[0]), statistics.median(samples[1]))
    return found


def prepare(dev: Any) -> None:
    for i in range(5):
        body = {"name": f"t{i}", "language": "python", "code": "print('hi')",
                "description": "bench tool", "input_schema": {"type": "object"}}  # fmt: skip
        answer = dev.api("POST", "/api/tools", json=body)
        assert answer.status_code == 201, answer.text
    for i in range(3):
        assert dev.api("POST", "/api/keys", json={"name": f"k{i}"}).status_code == 201
    answer = dev.api("POST", "/api/views", json={"name": "v1", "tools": ["t0", "t1"]})
    assert answer.status_code in (200, 201), answer.text


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--small", type=int, default=100)
    parser.add_argument("--large", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=21)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kiln-bench-reads-") as tmp:
        devs = []
        try:
            for size in (args.small, args.large):
                state = Path(tmp) / f"state-{size}"
                dev = start_dev(state, free_port(), timeout_s=120)
                devs.append(dev)
                prepare(dev)
                t0 = time.monotonic()
                seed(emulator_client(state / "aws"), size)
                print(f"seeded {size} entries in {time.monotonic() - t0:.0f} s", flush=True)
            timed = time_reads(*devs, args.repeat)
        finally:
            for dev in devs:
                stop(dev.process)
    load = Path("/proc/loadavg").read_text().split()[:3]
    print(f"load average {' '.join(load)} (2 cores)")
    print(f"{'read':<12} {args.small:>10} {args.large:>10}  ratio")
    worst = 0.0
    for name, _ in READS:
        small, large = timed[name]
        worst = max(worst, large / small)
        print(f"{name:<12} {small * 1000:>8.1f}ms {large * 1000:>8.1f}ms  {large / small:.2f}x")
    print(f"worst ratio {worst:.2f}x (goal: at most 1.5x)")
    return 0 if worst <= 1.5 else 1


if __name__ == "__main__":
    raise SystemExit(main())
