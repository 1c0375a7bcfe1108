"""bench/codemode at its smallest (one timed round), run as its README says: both arms of the
three-step job, through the official Python SDK's client against a real `kiln dev`, reach the
same answer, and code mode's share of the job's bytes meets the goal.

The bench's numbers live in bench/README.md; this keeps it from rotting while code mode
changes (the wrapper, the stubs, the meta-tools). The SDK runs in its own venv
(bench/protocol/sdk.py: `KILN_BENCH_SDK`, else made by uv in ~/.cache on first use).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

pytestmark = pytest.mark.slow


def test_the_code_mode_bench_does_the_job_both_ways_and_prints_its_verdicts() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.codemode.run", "--rounds", "1"],
        cwd=ROOT, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    shown = f"stdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr[-3000:]}"
    assert done.returncode == 0, shown
    lines = done.stdout.splitlines()
    answers = next((line for line in lines if line.startswith("answers:")), "")
    assert answers.startswith(
        "answers: direct 'KLN-2026-0412 $4,065.10', code 'KLN-2026-0412 $4,065.10'"
    ), shown
    verdicts = [line for line in lines if line.startswith(("one job in", "the job alone"))]
    assert len(verdicts) == 2, shown
    assert verdicts[0].endswith((": PASS", ": FAIL")), shown  # printed, not asserted: the bench's
    assert verdicts[1].endswith(": PASS"), shown  # the job without the definitions: at most 1/3
