"""The runner function's init in CPU: `kiln.lambda_handlers.runner` imported and built in a
fresh process, after the runtime's own modules (awslambdaric), for each tree, alternating.

CPU time of the process (not its helper's) from after awslambdaric's import to the handler
built: what Kiln's init adds to a bare runtime, less sensitive than wall time to the load of a
shared machine (bench/runner/new_tenant.py measures the wall time under the Lambda profile).

usage: python -m bench.runner.init_cpu [--rounds 10] TREE [TREE ...]   (TREE: a checkout,
e.g. `.` and `.ab/main`; its `functions/` is imported)
"""

from __future__ import annotations

import argparse
import compileall
import os
import statistics
import subprocess
import sys
from pathlib import Path

CHILD = """
import os, resource
import awslambdaric.bootstrap
def cpu():
    used = resource.getrusage(resource.RUSAGE_SELF)
    return (used.ru_utime + used.ru_stime) * 1000
began = cpu()
from kiln.lambda_handlers import runner
print(cpu() - began)
os._exit(0)  # the helper it started is left to end with its stdin
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("trees", nargs="+", type=Path)
    args = parser.parse_args()
    env = {**os.environ, "_HANDLER": "kiln.lambda_handlers.runner", "AWS_REGION": "us-east-1",
           "AWS_LAMBDA_FUNCTION_NAME": "kiln-runner", "PYTHONDONTWRITEBYTECODE": "1"}  # fmt: skip
    for tree in args.trees:  # compiled first, as a deploy ships them
        compileall.compile_dir(tree / "functions", quiet=1)
    found: dict[Path, list[float]] = {tree: [] for tree in args.trees}
    for _ in range(args.rounds):
        for tree in args.trees:
            done = subprocess.run(
                [sys.executable, "-c", CHILD], env={**env, "PYTHONPATH": str(tree / "functions")},
                capture_output=True, text=True, timeout=60, check=False,
            )  # fmt: skip
            if done.returncode:
                sys.exit(f"{tree}: {done.stderr[-2000:]}")
            found[tree].append(float(done.stdout.split()[-1]))
    print(f"load average {os.getloadavg()[0]:.1f}; {args.rounds} rounds, CPU ms median (min)")
    for tree, times in found.items():
        print(f"  {tree!s:30} {statistics.median(times):6.1f} ({min(times):6.1f})")


if __name__ == "__main__":
    main()
