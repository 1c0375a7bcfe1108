"""A change's effect on a tool's first call, measured as A/B between source trees, interleaved.

Run: python -m bench.runner.trees before=../kiln-before after=. [--rounds N]

Each NAME=PATH is a checkout of Kiln; its `kiln dev` runs from PATH/functions on this
interpreter (the same dependencies for every tree), with one trivial tool (Python, or Node with
`--node`). Round by round, in alternating order so that no tree always goes first, each
tree gets: a call after 1 s idle (no save), the first call 1 s after a save, the first call
sent the moment a save answers, and three calls back to back; beside them, bare interpreter
starts after the same idle and back to back. Medians and ratios to both bare starts are
printed with the load. The trees share the machine's state at every moment, which a
before-and-after pair of separate runs of `http_call.py` does not (this VM's wake-up after
an idle second moves with the load).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import httpx

from bench.runner.http_call import (
    BARE_ENV,
    HEADERS,
    author_loop,
    caller,
    kiln_dev,
    timed,
    write_tools,
)
from kiln.runner.nodejs import find_node


def measure(trees: dict[str, Path], rounds: int, tool: str) -> dict[str, list[float]]:
    python = [sys.executable, "-I", "-S", "-c", "pass"]
    bare_cmd = [str(find_node()), "-e", "0"] if tool == "bench_node" else python
    samples: dict[str, list[float]] = {}

    def add(label: str, seconds: float) -> None:
        samples.setdefault(label, []).append(seconds * 1000)

    def bare() -> None:
        subprocess.run(bare_cmd, check=True, env=BARE_ENV)

    with tempfile.TemporaryDirectory(prefix="kiln-trees-") as tmp, ExitStack() as stack:
        clients = {}
        for name, tree in trees.items():
            work = Path(tmp) / name
            write_tools(work / "tools")
            url = stack.enter_context(kiln_dev(work, PYTHONPATH=str(tree / "functions")))
            clients[name] = stack.enter_context(httpx.Client(base_url=url, headers=HEADERS))
            for _ in range(3):
                caller(clients[name])(tool)()
        for number in range(rounds):
            order = list(trees) if number % 2 == 0 else list(reversed(trees))
            time.sleep(1.0)
            add("bare, 1 s idle", timed(bare))
            for name in order:
                author_loop(clients[name], tool, f"{name}:", 2 * number, 1.0, add)
            time.sleep(1.0)
            for _ in range(3):
                add("bare, back to back", timed(bare))
            for name in order:
                call = caller(clients[name])(tool)
                for _ in range(3):
                    add(f"{name}: call back to back", timed(call))
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trees", nargs="+", help="NAME=PATH of a Kiln checkout")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--node", action="store_true", help="a Node tool instead of Python")
    args = parser.parse_args()
    trees = {}
    for given in args.trees:
        name, _, path = given.partition("=")
        if not (Path(path) / "functions" / "kiln").is_dir():
            raise SystemExit(f"{given}: not NAME=PATH of a Kiln checkout (no functions/kiln)")
        trees[name] = Path(path).resolve()
    loads = [os.getloadavg()[0]]
    samples = measure(trees, args.rounds, "bench_node" if args.node else "bench_py")
    loads.append(os.getloadavg()[0])
    idle = statistics.median(samples.pop("bare, 1 s idle"))
    b2b = statistics.median(samples.pop("bare, back to back"))
    print(f"{'node' if args.node else 'python'}, {args.rounds} rounds, load {loads[0]:.1f} "
          f"-> {loads[1]:.1f}; bare start back to back {b2b:.1f} ms, after 1 s idle "
          f"{idle:.1f} ms")  # fmt: skip
    print(f"  {'':44s} {'median':>8s}   x bare back to back   x bare after idle")
    for label in sorted(samples, key=lambda label: (label.split(":")[1], label)):
        median = statistics.median(samples[label])
        ratios = f"   {median / b2b:17.2f}x   {median / idle:15.2f}x"
        print(f"  {label:44s} {median:6.1f} ms{'' if 'save (answer)' in label else ratios}")


if __name__ == "__main__":
    main()
