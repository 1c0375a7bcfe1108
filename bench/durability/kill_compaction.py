"""Bench: `kill -9` of the emulator while its journal is being compacted, N rounds.

Each round starts the emulator on the same state directory (compacting every 100 writes),
checks the counter every earlier round acknowledged, then writes (one transaction at a time,
each adding 1) until a compaction child is running and SIGKILLs the emulator: in odd rounds
at a random moment while the child works or after, in even rounds the moment the journal
file is renamed (the swap). A write in flight at the kill may or may not have been applied;
an acknowledged one must be there. Prints the writes lost (goal 0).

    python -m bench.durability.kill_compaction [--rounds 20]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

from kiln.aws.clients import AwsClients, ensure_resources, make_clients  # noqa: E402
from kiln.local.emulator import run_emulator  # noqa: E402

TABLE = "kiln-bench"
KEY = {"pk": {"S": "counter"}, "sk": {"S": "one"}}
ADD = {"TableName": TABLE, "Key": KEY, "UpdateExpression": "ADD n :one",
       "ExpressionAttributeValues": {":one": {"N": "1"}}}  # fmt: skip


def compactors(journal: Path) -> list[int]:
    found = []
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"kiln.local.emulator.compactor" in argv and str(journal).encode() in argv:
            found.append(int(proc.name))
    return found


def counter(clients: AwsClients) -> int:
    got = clients.dynamodb.get_item(TableName=TABLE, Key=KEY, ConsistentRead=True)
    return int(got["Item"]["n"]["N"]) if "Item" in got else 0


def one_round(state: Path, n: int, acknowledged: int) -> tuple[int, int, str]:
    """(writes found at the start, writes acknowledged by the end of the round, and when
    the kill came: during a compaction, at its swap, or after it)."""
    journal = state / "journal"
    with run_emulator(state, compact_after=100) as endpoint:
        keys = (endpoint.credentials.access_key_id, endpoint.credentials.secret_access_key)
        clients = make_clients(endpoint_url=endpoint.url, region="us-east-1", credentials=keys)
        ensure_resources(clients, table=TABLE, bucket="kiln-bench")
        found = counter(clients)
        acked = [max(found, acknowledged)]
        stop = threading.Event()

        def write() -> None:
            while not stop.is_set():
                try:
                    clients.dynamodb.transact_write_items(TransactItems=[{"Update": ADD}])
                except Exception:
                    return  # the emulator is gone: this write was not acknowledged
                acked[0] += 1

        writer = threading.Thread(target=write)
        writer.start()
        deadline = time.monotonic() + 60
        while not compactors(journal) and time.monotonic() < deadline:
            time.sleep(0.005)
        if n % 2:
            time.sleep(random.uniform(0, 3))
            when = "during" if compactors(journal) else "after"
        else:
            inode = journal.stat().st_ino
            while journal.stat().st_ino == inode and time.monotonic() < deadline:
                pass
            when = "at the swap" if journal.stat().st_ino != inode else "during"
        os.kill(json.loads((state / "endpoint.json").read_text())["pid"], signal.SIGKILL)
        stop.set()
        writer.join()
    deadline = time.monotonic() + 30
    while compactors(journal) and time.monotonic() < deadline:
        time.sleep(0.05)
    return found, acked[0], when


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    state = Path(tempfile.mkdtemp(prefix="kiln-kill-compaction-")) / "aws"
    acknowledged, lost, kills = 0, 0, dict.fromkeys(("during", "at the swap", "after"), 0)
    for n in range(args.rounds + 1):
        found, acked, when = one_round(state, n, acknowledged)
        if found < acknowledged:
            lost += acknowledged - found
            print(f"round {n}: {acknowledged - found} acknowledged writes lost")
        if n == args.rounds:
            break  # the last round only checks
        kills[when] += 1
        acknowledged = acked
    print(f"rounds: {args.rounds}  acknowledged writes: {acknowledged}  lost: {lost} (goal 0)")
    print("SIGKILLs: " + ", ".join(f"{count} {when}" for when, count in kills.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
