"""Bench: `kill -9` of a real `kiln dev` right after a write is acknowledged, N rounds.

Each round starts `kiln dev` on the same state directory, checks that every write
acknowledged in earlier rounds is there, creates a tool and updates the previous round's
tool (both acknowledged), then SIGKILLs `kiln dev` at once. Prints the writes lost (goal 0)
and how long each start took.

    python -m bench.durability.kill9 [--rounds 20]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

from tests.support.app import free_port  # noqa: E402
from tests.support.devserver import start_dev  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    state = Path(tempfile.mkdtemp(prefix="kiln-kill9-")) / "state"
    port = free_port()
    acknowledged: dict[str, int] = {}
    lost: list[str] = []
    starts: list[float] = []
    for n in range(args.rounds + 1):
        began = time.monotonic()
        dev = start_dev(state, port)
        starts.append(time.monotonic() - began)
        try:
            for name, revision in acknowledged.items():
                got = dev.api("GET", f"/api/tools/{name}")
                if got.status_code != 200 or got.json()["revision"] != revision:
                    lost.append(f"round {n}: {name} r{revision}")
            if n == args.rounds:
                break
            tool = {"name": f"t{n}", "description": "d", "language": "python", "code": "print(1)"}
            if dev.api("POST", "/api/tools", json=tool).status_code == 201:
                acknowledged[f"t{n}"] = 1
            if n:
                edited = {**tool, "name": f"t{n - 1}", "description": f"round {n}"}
                headers = {"If-Match": '"1"'}
                put = dev.api("PUT", f"/api/tools/t{n - 1}", json=edited, headers=headers)
                if put.status_code == 200:
                    acknowledged[f"t{n - 1}"] = 2
        finally:
            dev.process.kill()
            dev.process.wait()
    writes = sum(acknowledged.values())
    print(f"rounds: {args.rounds}  acknowledged writes: {writes}  lost: {len(lost)}")
    for line in lost:
        print("  LOST", line)
    print(f"kiln dev start: median {statistics.median(starts):.2f} s, max {max(starts):.2f} s")
    return 1 if lost else 0


if __name__ == "__main__":
    raise SystemExit(main())
