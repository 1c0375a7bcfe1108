"""Bench: the slowest write while the emulator's journal is compacted, with ~5,000 items.

Starts the local emulator (a real process, the default compaction threshold) and writes
through boto3 with a long read timeout, so a write held up by a compaction shows its full
wait instead of a timeout: first `--items` PutItems (ledger-sized items), then `--updates`
UpdateItems spread over them, so the journal is compacted at least once with every item
in the table. Prints the median write, the slowest, their ratio, and how many writes took
longer than the production client's read timeout (kiln.aws.clients.StoreDeadlines.read_s: such a
write is a 503 for a caller of Kiln).

    python -m bench.durability.compaction [--items 5000] [--updates 6000]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

from kiln.aws.clients import StoreDeadlines, ensure_resources, make_clients  # noqa: E402
from kiln.local.emulator import run_emulator  # noqa: E402
from kiln.local.emulator.journal import read_records  # noqa: E402

TABLE = "kiln-bench"


def item(n: int) -> dict[str, dict[str, str]]:
    return {
        "pk": {"S": "LEDGER#2026-11-30"},
        "sk": {"S": f"2026-11-30T18:00:00.000Z#{n:08d}"},
        "tool": {"S": "echo"},
        "outcome": {"S": "ok"},
        "ms": {"N": str(n % 997)},
        "caller": {"S": "kiln_author_" + "x" * 40},
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--items", type=int, default=5000)
    parser.add_argument("--updates", type=int, default=6000)
    args = parser.parse_args()
    timeout_s = StoreDeadlines().read_s
    state = Path(tempfile.mkdtemp(prefix="kiln-compaction-")) / "aws"
    latencies: list[float] = []
    with run_emulator(state) as endpoint:
        keys = (endpoint.credentials.access_key_id, endpoint.credentials.secret_access_key)
        patient = StoreDeadlines(read_s=120.0, attempts=1)
        clients = make_clients(
            endpoint_url=endpoint.url, region="us-east-1", credentials=keys, deadlines=patient
        )
        ensure_resources(clients, table=TABLE, bucket="kiln-bench")
        dynamodb = clients.dynamodb
        journal = state / "journal"
        inode, replaced = journal.stat().st_ino, 0
        for n in range(args.items + args.updates):
            began = time.perf_counter()
            if n < args.items:
                dynamodb.put_item(TableName=TABLE, Item=item(n))
            else:
                target = item(n % args.items)
                dynamodb.update_item(
                    TableName=TABLE,
                    Key={"pk": target["pk"], "sk": target["sk"]},
                    UpdateExpression="ADD hits :one",
                    ExpressionAttributeValues={":one": {"N": "1"}},
                )
            latencies.append(time.perf_counter() - began)
            if journal.stat().st_ino != inode:  # a compaction's result was renamed in
                inode, replaced = journal.stat().st_ino, replaced + 1
        # A compaction may still be running in the background: wait for it to be adopted.
        ended, deadline = time.monotonic(), time.monotonic() + 120
        while len(read_records(journal)[0]) >= 5000 and time.monotonic() < deadline:
            time.sleep(0.1)
        settled = time.monotonic() - ended
        if journal.stat().st_ino != inode:
            replaced += 1
        left = len(read_records(journal)[0])
    writes = len(latencies)
    median, worst = statistics.median(latencies), max(latencies)
    slow = sum(1 for took in latencies if took > timeout_s)
    print(
        f"writes: {writes}  journal compacted {replaced} times, {left} records at the end "
        f"({settled:.1f} s after the last write)"
    )
    print(
        f"median write {median * 1000:.1f} ms, slowest {worst * 1000:.0f} ms "
        f"(write #{latencies.index(worst) + 1}), ratio {worst / median:.0f}x"
    )
    print(f"writes slower than the {timeout_s:.0f} s read timeout: {slow} (goal 0)")
    over = [f"{took * 1000:.0f}" for took in sorted(latencies)[-5:]]
    print(f"five slowest (ms): {', '.join(over)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
