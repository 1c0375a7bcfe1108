"""The leak guard itself: an inner pytest session that logs a planted secret must fail."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[2]
FUNCTIONS = TESTS.parent / "functions"

INNER = """
import logging

def test_logs(planted_secrets):
    secret = planted_secrets.add("kiln_call_" + "Q" * 43)
    other = planted_secrets.add("value-of-a-tool-secret")
    {body}
"""


def run_inner(tmp_path: Path, body: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["support.leakguard"]\n')
    (tmp_path / "test_inner.py").write_text(INNER.format(body=body))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), str(FUNCTIONS)])}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
        check=False,
    )


def test_session_fails_when_a_planted_secret_is_logged(tmp_path: Path) -> None:
    inner = run_inner(tmp_path, 'logging.getLogger("kiln.x").warning("value=%s", other)')
    assert inner.returncode == 1, inner.stdout
    assert "planted secrets found in log output" in inner.stdout
    assert "1 passed" in inner.stdout


def test_session_passes_when_redaction_hides_the_key(tmp_path: Path) -> None:
    body = (
        "from kiln.observability import redact\n"
        "    redact.install()\n"
        '    logging.getLogger("kiln.x").info("auth header Bearer %s", secret)\n'
        '    logging.getLogger("kiln.y").info("key %s", secret)'
    )
    inner = run_inner(tmp_path, body)
    assert inner.returncode == 0, inner.stdout
    assert "no leak" in inner.stdout


def test_session_fails_on_an_unredacted_key(tmp_path: Path) -> None:
    inner = run_inner(tmp_path, 'logging.getLogger("kiln.x").info("key %s", secret)')
    assert inner.returncode == 1, inner.stdout
