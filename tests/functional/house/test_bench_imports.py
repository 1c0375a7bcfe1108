"""Every benchmark imports as the module bench/README.md says to run it by
(`python -m bench.<room>.<script>` from the repository root), in a fresh process: a helper
that moved or was renamed (`tests.devproc` did, and bench/load broke unseen) fails here, not at
the next person's run."""

from __future__ import annotations

import json
import re
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


def _scripts() -> dict[str, str]:
    """Each runnable benchmark (it has a `__main__` block): its module name -> its source."""
    found = {}
    for path in sorted((ROOT / "bench").rglob("*.py")):
        source = path.read_text()
        if '__name__ == "__main__"' in source:
            found[".".join(path.relative_to(ROOT).with_suffix("").parts)] = source
    return found


def test_every_benchmark_says_to_run_it_as_the_module_it_is() -> None:
    """A usage line such as `python bench/x/run.py` or one that sets PYTHONPATH fails for a new
    user (the benchmarks import `bench.*` and `tests.*` as packages from the repository root)."""
    scripts = _scripts()
    assert "bench.runner.http_call" in scripts
    wrong = {}
    for name, source in scripts.items():
        doc = source.split('"""')[1] if source.startswith('"""') else ""
        if f"python -m {name}" not in doc:
            wrong[name] = "its docstring never says `python -m " + name + "`"
        for bad in re.findall(r"python bench/\S+|PYTHONPATH=\S+ python", source):
            wrong[name] = f"it says `{bad}`"
    assert wrong == {}, "\n".join(f"{name}: {why}" for name, why in wrong.items())


def test_every_benchmark_has_one_row_in_the_results_table() -> None:
    """bench/README.md's table is where a reader finds a benchmark's last result: one row each
    (the table once held two rows for five scripts, an older and a newer)."""
    rows = [
        line.split("|")[1]
        for line in (ROOT / "bench" / "README.md").read_text().splitlines()
        if line.startswith("| `bench/")
    ]
    named: dict[str, int] = {}
    for cell in rows:
        room = ""
        for shown in re.findall(r"`([\w/.]+\.py)`", cell):
            parts = shown.removesuffix(".py").split("/")
            if parts[0] == "bench":
                room = parts[1]
                parts = parts[1:]
            module = "bench." + ".".join([room, *parts] if len(parts) == 1 else parts)
            named[module] = named.get(module, 0) + 1
    scripts = _scripts()
    missing = sorted(set(scripts) - set(named))
    twice = sorted(name for name, count in named.items() if count > 1)
    assert (missing, twice) == ([], []), f"no row: {missing}; more than one row: {twice}"
