"""The GitHub workflows pass actionlint."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

import support.toolchain as toolchain

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.slow
def test_actionlint_finds_nothing_in_the_workflows() -> None:
    actionlint = toolchain.actionlint()
    workflows = sorted(str(p) for p in (ROOT / ".github" / "workflows").glob("*.yml"))
    assert workflows
    done = subprocess.run(
        [*actionlint, *workflows],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
