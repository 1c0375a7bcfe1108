"""Runner latency: a trivial tool through `Runner.run`, beside a bare interpreter start.

Run: python -m bench.runner.run [--rounds N]

Each line prints the median of N runs and its ratio to the bare start of the same
interpreter (`python -I -S -c pass`, `node -e 0`), measured in the same process, interleaved
round by round so that machine noise hits both alike. Goal: within 1.5x of the bare start.

Each tool runs twice per round: "cold" through a Runner without standbys (every run is
prepared on its call: private directory, uid, mount namespace or Landlock fence, fork or
exec) and "standby" through one that keeps a prepared run per tool (see
kiln/runner/standby.py; the first call of a tool is cold, the rest find one waiting). A
standby is made in the background right after its call; runs follow each other without a
pause (idle pauses make this VM's next wake-up slow), in an order where that work can only
slow standby runs, never the baselines: standby runs first, then cold runs (during which the
last standby is made), then the bare starts. `--settle S` pauses before each.
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


async def main(rounds: int, settle_s: float) -> None:
    cold = Runner(RunnerSettings())
    warm = Runner(RunnerSettings(standby_runs=len(TOOLS)))
    node = str(find_node())
    cases: dict[str, Callable[[], Awaitable[float]]] = {}
    for name, (language, code) in TOOLS.items():
        cases[f"{name}, standby"] = through_runner(warm, language, code)
    for name, (language, code) in TOOLS.items():
        cases[f"{name}, cold"] = through_runner(cold, language, code)
    cases["bare python -I -S -c pass"] = bare([sys.executable, "-I", "-S", "-c", "pass"])
    cases["bare node -e 0"] = bare([node, "-e", "0"])
    samples: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(3):  # warm up caches and imports
        for once in cases.values():
            await once()
    for _ in range(rounds):
        for name, once in cases.items():
            if settle_s:
                warm.settle()
                await asyncio.sleep(settle_s)
            samples[name].append(await once())
    warm.settle()
    print(f"standbys waiting at the end: {warm.standbys}")
    cold.close()
    warm.close()
    medians = {name: statistics.median(values) for name, values in samples.items()}
    print(f"{rounds} rounds, python {sys.version.split()[0]}, node at {node}")
    print(f"  {'':38s} {'median':>9s} {'min':>8s}   ratio of medians (of minimums)")
    for name, median in medians.items():
        bare_name = "bare node -e 0" if "node" in name else "bare python -I -S -c pass"
        fastest, bare_fastest = min(samples[name]), min(samples[bare_name])
        print(
            f"  {name:38s} {median * 1000:6.1f} ms {fastest * 1000:5.1f} ms   "
            f"{median / medians[bare_name]:4.2f}x ({fastest / bare_fastest:4.2f}x) bare"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--settle", type=float, default=0.0, help="pause before each (s)")
    args = parser.parse_args()
    asyncio.run(main(args.rounds, args.settle))
