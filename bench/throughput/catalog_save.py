"""A catalog save with 200 warm containers: what each reads to catch up, and who is refused.

Every warm container serving requests sees a save within the staleness window (1 s in
template.yaml), so all of them catch up within about a second. Before the change log
(`before`: CatalogStore.changed_since answers None, today's main) each re-read the whole
`TOOLS` partition; with it (`after`) each reads the log and the changed tool only.

The containers are real `CatalogSnapshots` (one per container, each with its own store;
Kiln's own boto3 clients, 2 attempts each, as the functions have them) against the local
emulator with DynamoDB's per-partition limits on. This machine does not serve 200 containers'
reads in one second: the script first times the burst (`D` seconds, limits off), then runs
it again with the limits scaled to the same time, 3000/D reads and 1000/D writes a second per
partition: what AWS would see in the 1 s window, spread over D. A container whose read fails
after its retries is a request answered "Catalog unavailable" (serving/backend.py). The read
units a container spends to catch up are counted on one container alone, before the others
(a concurrent burst on this machine also times reads out: those never reach the call log).

usage: python -m bench.throughput.catalog_save [--containers 200] [--tools 100]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

from kiln.aws.clients import AwsClients, StoreUnavailableError, ensure_resources, make_clients  # noqa: E402
from kiln.catalog.model import Draft  # noqa: E402
from kiln.catalog.rules import check_draft  # noqa: E402
from kiln.catalog.snapshot import CatalogSnapshots  # noqa: E402
from kiln.catalog.store import CatalogStore  # noqa: E402
from kiln.local.emulator import run_emulator  # noqa: E402
from kiln.local.emulator.privacy import write_private  # noqa: E402
from kiln.local.emulator.throughput import read_charge  # noqa: E402

TABLE = "kiln-catalog-save"
THREADS = 32
READS, WRITES = 3000.0, 1000.0  # DynamoDB's per-partition limits, a second


class WholeReads(CatalogStore):
    """The store as main had it: no change log read, every move is a whole re-read."""

    def changed_since(self, have: int, now: int) -> set[str] | None:
        return None


def tool(index: int, code: str = "print('x')\n") -> Draft:
    properties = {
        "amount": {"type": "number", "description": "The net amount, in pounds and pence."},
        "rate": {"type": "number", "description": "The VAT rate as a fraction, e.g. 0.2."},
    }
    description = f"Adds UK VAT to a net amount (variant {index})."
    schema = {"type": "object", "properties": properties}
    return check_draft({"name": f"vat_tool_{index:03d}", "language": "python", "code": code,
                        "input_schema": schema, "description": description})  # fmt: skip


@contextmanager
def emulator(state: Path, log: Path, limits: str | None) -> Iterator[list[AwsClients]]:
    with run_emulator(state, call_log=log, partition_limits=limits) as endpoint:
        yield [make_clients(endpoint_url=endpoint.url, region="us-east-1") for _ in range(THREADS)]


def records_since(log: Path, start: int) -> list[dict[str, Any]]:
    with log.open("rb") as handle:
        handle.seek(start)
        return [json.loads(line) for line in handle.read().splitlines() if line.strip()]


def read_units(records: list[dict[str, Any]]) -> float:
    total = 0.0
    for record in records:
        if record["service"] == "dynamodb" and record["status"] == 200:
            charge = read_charge(record["target"], record.get("body") or {},
                                 record["response_bytes"])  # fmt: skip
            total += charge[1] if charge else 0.0
    return total


def warm(snapshots: list[CatalogSnapshots]) -> None:
    """Each container's first request: a whole read, retried while the limits refuse it."""

    def first(one: CatalogSnapshots) -> None:
        for _ in range(200):
            try:
                one.current()
                return
            except StoreUnavailableError:
                time.sleep(0.5)
        raise SystemExit("a container could not warm up in 100 s")

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(first, snapshots))


def burst(store_class: type[CatalogStore], clients: list[AwsClients], containers: int,
          log: Path) -> dict[str, Any]:  # fmt: skip
    """Warm the containers, save one tool, then every container's next request at once."""
    stores = [store_class(c.dynamodb, c.s3, table=TABLE, bucket=TABLE) for c in clients]
    snapshots = [CatalogSnapshots(stores[i % len(stores)]) for i in range(containers)]
    warm(snapshots)
    saver = stores[0]
    current = saver.get("vat_tool_007")
    draft = tool(7, code=f"print({time.time()!r})\n")
    saved = saver.update("vat_tool_007", draft, expected_revision=current.head.number)
    start = log.stat().st_size
    outcomes: Counter[str] = Counter()
    lock = threading.Lock()

    def request(one: CatalogSnapshots) -> None:
        try:
            moved = one.current().tools["vat_tool_007"].head.code_sha256
            outcome = "ok" if moved == saved.head.code_sha256 else "stale"
        except StoreUnavailableError:
            outcome = "Catalog unavailable"
        with lock:
            outcomes[outcome] += 1

    request(snapshots[0])  # one container alone: what a catch-up reads, undisturbed
    alone = [r for r in records_since(log, start) if r["service"] == "dynamodb"]
    start = log.stat().st_size
    began = time.perf_counter()
    with ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(request, snapshots[1:]))
    seconds = time.perf_counter() - began
    records = [r for r in records_since(log, start) if r.get("target") != "TransactWriteItems"]
    reads = [r for r in records if r["service"] == "dynamodb"]
    throttled = sum(1 for r in reads if r["status"] == 400)
    return {"seconds": seconds, "outcomes": dict(outcomes), "throttled": throttled,
            "units": read_units(alone), "calls": len(alone)}  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--containers", type=int, default=200)
    parser.add_argument("--tools", type=int, default=100)
    args = parser.parse_args()
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    modes = {"before (whole re-read)": WholeReads, "after (change log)": CatalogStore}
    rows: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as raw:
        state, log = Path(raw) / "emulator", Path(raw) / "calls.jsonl"
        state.mkdir()
        key = {"access_key_id": "testing", "secret_access_key": "testing"}
        write_private(state / "credentials.json", json.dumps(key).encode())
        with emulator(state, log, None) as clients:
            ensure_resources(clients[0], table=TABLE, bucket=TABLE)
            seeder = CatalogStore(clients[0].dynamodb, clients[0].s3, table=TABLE, bucket=TABLE)
            for index in range(args.tools):
                seeder.create(tool(index))
            timed = {mode: burst(kind, clients, args.containers, log)
                     for mode, kind in modes.items()}  # fmt: skip
        for mode, kind in modes.items():
            dilation = max(1.0, timed[mode]["seconds"])
            limits = f"{READS / dilation:.0f}/{WRITES / dilation:.0f}"
            with emulator(state, log, limits) as clients:
                rows[mode] = {**burst(kind, clients, args.containers, log), "limits": limits,
                              "calibrated_s": timed[mode]["seconds"]}  # fmt: skip
    print(
        f"load: {os.getloadavg()[0]:.1f} (1 min); {args.containers} warm containers, "
        f"{args.tools} tools; one save, then each container's next request"
    )
    print(
        "| catch-up | read units per container per save | reads per container | burst s "
        "(limits off) | limits RRU/WRU per s | throttled reads | answers |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for mode, row in rows.items():
        answers = ", ".join(f"{n} {k}" for k, n in sorted(row["outcomes"].items()))
        print(
            f"| {mode} | {row['units']:.2f} | {row['calls']:.2f} | {row['calibrated_s']:.1f} "
            f"| {row['limits']} | {row['throttled']} | {answers} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
