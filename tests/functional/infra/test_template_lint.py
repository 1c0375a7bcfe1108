"""The deployment template passes the linters CI runs: cfn-lint, and SAM's own validation."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from cfnlint.api import lint_file

import support.toolchain as toolchain

ROOT = Path(__file__).resolve().parents[3]


def test_cfn_lint_finds_nothing_in_the_template() -> None:
    matches = lint_file(ROOT / "template.yaml")
    assert [str(m) for m in matches] == []


def test_cfn_lint_finds_nothing_in_the_deploy_role_template() -> None:
    matches = lint_file(ROOT / "infra/github-oidc-role.yaml")
    assert [str(m) for m in matches] == []


@pytest.mark.slow
def test_sam_validate_lint_accepts_the_template() -> None:
    sam = toolchain.sam()
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
