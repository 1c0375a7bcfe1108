"""Bench: RSS of `kiln dev` (and of its emulator child) after 100 and after N catalog writes.

Writes go through the REST API as an author makes them: disable, enable and (one in ten)
an update of a tool's description, each one catalog transaction. Prints RSS after the
warm-up and at the end, and the ratio (goal: within 1.5x), for kiln dev and the emulator.

    python -m bench.durability.rss [--writes 10000]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]

from tests.support.app import free_port  # noqa: E402
from tests.support.devserver import AUTHOR_KEY, rss_kib, start_dev, stop_dev  # noqa: E402


def write(http: httpx.Client, url: str, n: int, revision: list[int]) -> None:
    if n % 10 == 9:
        tool = {"name": "churn", "description": f"write {n}", "language": "python",
                "code": "print(1)\n"}  # fmt: skip
        headers = {"If-Match": f'"{revision[0]}"'}
        answer = http.put(url + "/api/tools/churn", json=tool, headers=headers)
        revision[0] += 1
    else:
        action = "disable" if n % 2 == 0 else "enable"
        answer = http.post(f"{url}/api/tools/churn/{action}")
    answer.raise_for_status()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--writes", type=int, default=10_000)
    parser.add_argument("--warmup", type=int, default=100)
    args = parser.parse_args()
    state = Path(tempfile.mkdtemp(prefix="kiln-rss-")) / "state"
    dev = start_dev(state, free_port())
    try:
        emulator = dev.emulator_pid()
        assert emulator is not None
        headers = {"Authorization": f"Bearer {AUTHOR_KEY}"}
        with httpx.Client(headers=headers, timeout=30) as http:
            tool = {"name": "churn", "description": "d", "language": "python", "code": "print(1)\n"}
            http.post(dev.url + "/api/tools", json=tool).raise_for_status()
            revision = [1]
            for n in range(args.warmup):
                write(http, dev.url, n, revision)
            base = rss_kib(dev.process.pid), rss_kib(emulator)
            began = time.monotonic()
            for n in range(args.warmup, args.writes):
                write(http, dev.url, n, revision)
            took = time.monotonic() - began
            end = rss_kib(dev.process.pid), rss_kib(emulator)
    finally:
        stop_dev(dev)
    print(f"writes: {args.writes} ({(args.writes - args.warmup) / took:.0f}/s after warm-up)")
    for label, before, after in (("kiln dev", base[0], end[0]), ("emulator", base[1], end[1])):
        print(
            f"{label:9s} RSS after {args.warmup}: {before / 1024:.1f} MiB, after "
            f"{args.writes}: {after / 1024:.1f} MiB, ratio {after / before:.2f}x (goal <= 1.5x)"
        )
    total = (end[0] + end[1]) / (base[0] + base[1])
    print(f"together: ratio {total:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
