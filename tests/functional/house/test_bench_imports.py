"""Every benchmark imports as the module bench/README.md says to run it by
(`python -m bench.<room>.<script>` from the repository root), in a fresh process: a helper
that moved or was renamed (`tests.devproc` did, and bench/load broke unseen) fails here, not at
the next person's run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

PROBE = """
import importlib, json, sys, traceback
failed = {}
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
    except BaseException:
        failed[name] = traceback.format_exc(limit=3)
print(json.dumps(failed))
"""


def test_every_benchmark_imports_as_a_module_of_the_repository() -> None:
    names = sorted(
        ".".join(path.relative_to(ROOT).with_suffix("").parts)
        for path in (ROOT / "bench").rglob("*.py")
    )
    assert "bench.durability.kill9" in names
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *names],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    failed = json.loads(done.stdout.strip().splitlines()[-1])
    assert failed == {}, "\n".join(f"{name}:\n{trace}" for name, trace in failed.items())
