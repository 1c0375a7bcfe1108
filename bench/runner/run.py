"""Runner latency: a trivial tool through `Runner.run`, beside a bare interpreter start.

Run: PYTHONPATH=functions python bench/runner/run.py [--rounds N]

Each line prints the median of N runs and its ratio to the bare start of the same
interpreter (`python -I -S -c pass`, `node -e 0`), measured in the same process, interleaved
round by round so that machine noise hits both alike. Goal: within 1.5x of the bare start.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable

from kiln.runner import Runner, RunnerSettings, RunRequest, contract_text
from kiln.runner.nodejs import find_node

TOOLS = {
    "python print": ("python", "print('ok')\n"),
    "python hello (json stdin)": (
        "python",
        "import json, sys\nargs = json.load(sys.stdin)\n"
        "print(json.dumps({'message': 'Hello ' + args.get('name', 'world')}))\n",
    ),
    "node print": ("node", "console.log('ok');\n"),
    "node hello (json stdin)": (
        "node",
        "const fs = require('node:fs');\nconst args = JSON.parse(fs.readFileSync(0, 'utf8'));\n"
        "console.log(JSON.stringify({ message: `Hello ${args.name || 'world'}` }));\n",
    ),
}


# The bare start gets the same kind of minimal environment a tool gets: a server environment
# can make a start much slower (NODE_EXTRA_CA_CERTS, say, makes Node parse a CA bundle first).
BARE_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}


def bare(argv: list[str]) -> Callable[[], Awaitable[float]]:
    async def once() -> float:
        started = time.perf_counter()
        subprocess.run(argv, check=True, stdin=subprocess.DEVNULL, env=BARE_ENV)  # noqa: ASYNC221
        return time.perf_counter() - started

    return once


def through_runner(runner: Runner, language: str, code: str) -> Callable[[], Awaitable[float]]:
    request = RunRequest(language=language, code=code, arguments={"name": "bench"}, timeout_s=30)  # type: ignore[arg-type]

    async def once() -> float:
        started = time.perf_counter()
        result = await runner.run(request)
        elapsed = time.perf_counter() - started
        assert not result.failed, contract_text(result)
        return elapsed

    return once


async def main(rounds: int) -> None:
    runner = Runner(RunnerSettings())
    node = str(find_node())
    cases: dict[str, Callable[[], Awaitable[float]]] = {
        "bare python -I -S -c pass": bare([sys.executable, "-I", "-S", "-c", "pass"]),
        "bare node -e 0": bare([node, "-e", "0"]),
    }
    for name, (language, code) in TOOLS.items():
        cases[name] = through_runner(runner, language, code)
    samples: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(3):  # warm up caches and imports
        for once in cases.values():
            await once()
    for _ in range(rounds):
        for name, once in cases.items():
            samples[name].append(await once())
    medians = {name: statistics.median(values) for name, values in samples.items()}
    print(f"{rounds} rounds, python {sys.version.split()[0]}, node at {node}")
    print(f"  {'':30s} {'median':>9s} {'min':>8s}   ratio of medians (of minimums)")
    for name, median in medians.items():
        bare_name = "bare node -e 0" if "node" in name else "bare python -I -S -c pass"
        fastest, bare_fastest = min(samples[name]), min(samples[bare_name])
        print(
            f"  {name:30s} {median * 1000:6.1f} ms {fastest * 1000:5.1f} ms   "
            f"{median / medians[bare_name]:4.2f}x ({fastest / bare_fastest:4.2f}x) bare"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=40)
    asyncio.run(main(parser.parse_args().rounds))
