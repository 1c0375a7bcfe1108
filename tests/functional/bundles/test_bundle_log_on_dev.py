"""`kiln dev`'s own log says why a bundle build failed (issue 26: it said only `failed`)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.devserver import DevProcess, start_dev, stop

pytestmark = pytest.mark.slow

MISSING = "kiln-no-such-package-9f1c==1.0"
TOOL = {
    "name": "needs-missing",
    "description": "Needs a package no index has.",
    "language": "python",
    "requirements": [MISSING],
    "input_schema": {"type": "object"},
    "code": "print('{}')\n",
}


@pytest.fixture
def dev(tmp_path: Path) -> Iterator[DevProcess]:
    server = start_dev(tmp_path / ".kiln")
    try:
        yield server
    finally:
        stop(server.process)


def _line(log: Path, start: str, within_s: float) -> str:
    """The first line of `log` that starts with `start` (after the level and logger)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        for line in log.read_text(errors="replace").splitlines():
            if start in line:
                return line
        time.sleep(0.5)
    raise AssertionError(f"no {start!r} line in {within_s:.0f} s:\n{log.read_text()[-3000:]}")


def test_a_failed_build_s_log_line_says_why(dev: DevProcess) -> None:
    saved = dev.api("POST", "/api/tools", json=TOOL)
    assert saved.status_code == 201, saved.text
    bundle_id = saved.json()["bundle_id"]
    line = _line(dev.log, f"bundle {bundle_id}: failed", within_s=300)
    record = dev.api("GET", f"/api/bundles/{bundle_id}").json()
    assert record["status"] == "failed", record
    assert "kiln-no-such-package-9f1c" in line, line
    assert record["error"] in line, f"the log line does not carry the bundle's error:\n{line}"
