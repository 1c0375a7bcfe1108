"""Every command in the README runs, in order, as a new user would run it.

The README's ```sh blocks are executed in a fresh copy of the repository (the tracked files)
with a fresh HOME: the quick start makes its venv, installs Kiln and starts `kiln dev`; the
blocks after it run in that venv against that server; `tests/run` installs the test tools and
runs pytest. Three things differ from a user's shell, each because the test machine is not
theirs: `kiln dev` gets `--port 0` (8000 may be taken: it binds a free port and says which),
the URLs that name port 8000 name that port instead, and `tests/run` is asked to collect the
house tests only (not to run this whole suite inside itself).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from support.devserver import ANNOUNCED

ROOT = Path(__file__).resolve().parents[3]
FENCE = re.compile(r"^```sh\n(.*?)^```", re.S | re.M)
pytestmark = pytest.mark.slow


def blocks() -> list[str]:
    return [block.strip() for block in FENCE.findall((ROOT / "README.md").read_text("utf-8"))]


def test_the_readme_is_short_and_starts_with_the_quick_start() -> None:
    lines = (ROOT / "README.md").read_text("utf-8").splitlines()
    assert len(lines) <= 300, len(lines)
    assert "## Quick start" in lines[:60]
    headings = [line for line in lines if line.startswith("## ")]
    assert headings[:4] == ["## Quick start", "## Add a tool", "## Connect a client", "## Deploy"]
    assert headings[-1] == "## Where to read more"


def _copy_of_the_repository(into: Path) -> Path:
    tracked = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.split(b"\0")
    for name in filter(None, tracked):
        source = ROOT / name.decode()
        if source.is_file():
            target = into / name.decode()
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return into


def _shell(command: str, cwd: Path, env: dict[str, str], timeout: float) -> str:
    done = subprocess.run(
        ["bash", "-c", f"set -euo pipefail\n. .venv/bin/activate\n{command}"],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip
    assert done.returncode == 0, f"{command!r} exited {done.returncode}:\n{done.stderr[-3000:]}"
    return done.stdout


@pytest.fixture(scope="module")
def quick_start(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict, int]]:
    base = tmp_path_factory.mktemp("readme")
    repo = _copy_of_the_repository(base / "kiln")
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("KILN_", "AWS_", "VIRTUAL"))},
        "HOME": str(base / "home"),
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        # The machine's pip cache only saves downloads; without one pip fetches from the index.
        "PIP_CACHE_DIR": os.environ.get("PIP_CACHE_DIR", str(Path.home() / ".cache" / "pip")),
    }
    (base / "home").mkdir()
    start = blocks()[0]
    assert start.endswith("kiln dev"), start
    log = (base / "quick-start.log").open("w")
    server = subprocess.Popen(
        ["bash", "-c", f"{start} --port 0"],
        cwd=repo, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        url = _wait_for(server, base / "quick-start.log")
        yield repo, env, int(url.rsplit(":", 1)[1])
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=10)
        log.close()


def _wait_for(server: subprocess.Popen[bytes], log: Path) -> str:
    """The URL kiln dev announced, once /api/health answers there."""
    give_up = time.monotonic() + 900  # a fresh venv and a first pip install, on a busy machine
    while time.monotonic() < give_up:
        if server.poll() is not None:
            pytest.fail(f"the quick start ended ({server.returncode}):\n{log.read_text()[-3000:]}")
        announced = ANNOUNCED.search(log.read_bytes())
        try:
            url = announced.group(1).decode() if announced else None
            if url and httpx.get(url + "/api/health", timeout=2).status_code == 200:
                return url
        except httpx.HTTPError:
            pass
        time.sleep(1)
    pytest.fail(f"kiln dev did not answer:\n{log.read_text()[-3000:]}")


def test_every_readme_command_runs(quick_start: tuple[Path, dict, int]) -> None:
    repo, env, port = quick_start
    outputs: dict[str, str] = {}
    for block in blocks()[1:]:
        command = block.replace("127.0.0.1:8000", f"127.0.0.1:{port}")
        if command == "tests/run":
            command = "tests/run --collect-only -q -n 0 tests/unit/house"
        outputs[block] = _shell(command, repo, env, timeout=1200)
    assert len(outputs) >= 4, list(outputs)
    assert "collected" in outputs["tests/run"], outputs["tests/run"][-2000:]
    pushed = next(out for block, out in outputs.items() if "kiln tools push" in block)
    assert "add_vat" in pushed, pushed
    assert '"gross": "12.00"' in pushed, pushed
    called = next(out for block, out in outputs.items() if block.startswith("curl"))
    assert '"isError":false' in called, called
    assert "119.99" in called, called
    config = next(out for block, out in outputs.items() if "--client-config" in block)
    assert '"mcpServers"' in config, config
    assert '"stdio"' in config, config
