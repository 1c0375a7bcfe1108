"""The README's quick start: the install shows its progress and the local extra stays light."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_the_quick_start_install_is_not_silent() -> None:
    """184 of 212 s of a first run were a `pip install -q` that printed nothing."""
    readme = (ROOT / "README.md").read_text("utf-8")
    (command,) = [line for line in readme.splitlines() if "'.[local]'" in line and "venv" in line]
    assert "pip install" in command
    assert not re.search(r"pip install[^&]* -q\b", command), command


def test_the_local_extra_installs_moto_for_the_emulators_services_only() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"]
    local = extras["optional-dependencies"]["local"]
    assert not any(dep.startswith("moto[server]") or "moto[all]" in dep for dep in local), local
    assert any(dep.startswith("moto[dynamodb,s3,ssm]") for dep in local), local


def test_ci_runs_the_readmes_test_command_and_nothing_else() -> None:
    """CI runs what a reader is told to run: the README's quick start test command."""
    readme = (ROOT / "README.md").read_text("utf-8")
    blocks = re.findall(r"^```sh\n(.*?)^```", readme, re.S | re.M)
    (command,) = [block.strip() for block in blocks if block.strip().startswith("tests/")]
    ci = (ROOT / ".ci" / "run").read_text("utf-8").splitlines()
    steps = [line for line in ci if line.strip() and not line.startswith("#")]
    assert steps[-1] == command, ci
    assert steps[:-1] == ["set -euo pipefail", 'cd "$(dirname "$0")/.."'], ci
