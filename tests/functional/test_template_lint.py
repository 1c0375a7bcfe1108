"""The deployment template passes the linters CI runs: cfn-lint, and SAM's own validation."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from cfnlint.api import lint_file

ROOT = Path(__file__).resolve().parents[2]


def sam_binary() -> str | None:
    """`sam` from KILN_SAM or PATH. SAM CLI pins boto3 and pydantic below this project's
    versions, so it lives in a venv of its own (see infra/README.md)."""
    return os.environ.get("KILN_SAM") or shutil.which("sam")


def test_cfn_lint_finds_nothing_in_the_template() -> None:
    matches = lint_file(ROOT / "template.yaml")
    assert [str(m) for m in matches] == []


def test_cfn_lint_finds_nothing_in_the_deploy_role_template() -> None:
    matches = lint_file(ROOT / "infra/github-oidc-role.yaml")
    assert [str(m) for m in matches] == []


@pytest.mark.skipif(
    sam_binary() is None, reason="SAM CLI not installed (set KILN_SAM or put sam on PATH)"
)
def test_sam_validate_lint_accepts_the_template() -> None:
    sam = sam_binary()
    assert sam is not None
    env = dict(os.environ, SAM_CLI_TELEMETRY="0", AWS_DEFAULT_REGION="us-east-1")
    done = subprocess.run(
        [sam, "validate", "--lint", "--template-file", str(ROOT / "template.yaml")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "is a valid SAM Template" in done.stdout + done.stderr
