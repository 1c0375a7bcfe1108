"""The helper process that forks runs: one per server process, stopped by the last Runner."""

from __future__ import annotations

import asyncio
import shutil
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from kiln.runner import Runner, RunnerSettings, RunRequest, contract_text
from support.runner import is_alive, wait_for


def hello(runner: Runner) -> str:
    request = RunRequest(language="python", code="print('hi')", arguments={}, timeout_s=10)
    return contract_text(asyncio.run(runner.run(request)))


@pytest.fixture
def python() -> Iterator[Path]:
    """An interpreter path no other test's Runner uses: the helper is shared per path, and
    a Runner an earlier test left for the garbage collector would keep a shared one alive.
    (Not under /tmp: runs get a /tmp of their own, so an interpreter there is unreachable.)"""
    home = Path.home() / ".cache" / "kiln-tests" / f"python-{uuid.uuid4().hex}"
    link = home / "bin" / "python3"
    link.parent.mkdir(parents=True)
    link.symlink_to(sys.executable)
    yield link
    shutil.rmtree(home)


def test_runners_of_one_process_share_a_helper_that_the_last_close_stops(
    tmp_path: Path, python: Path
) -> None:
    first = Runner(RunnerSettings(work_root=tmp_path, python_executable=python))
    second = Runner(
        RunnerSettings(work_root=tmp_path, python_executable=python, max_concurrent_runs=1)
    )
    assert hello(first) == "hi"
    assert hello(second) == "hi"
    helper = first.helper_pid
    assert helper is not None
    assert second.helper_pid == helper
    first.close()
    assert is_alive(helper)
    assert hello(second) == "hi"  # still served after the other Runner let go
    second.close()
    wait_for(lambda: not is_alive(helper))


def test_a_collected_runner_lets_go_of_the_helper(tmp_path: Path, python: Path) -> None:
    runner = Runner(RunnerSettings(work_root=tmp_path, python_executable=python))
    assert hello(runner) == "hi"
    helper = runner.helper_pid
    assert helper is not None
    del runner
    wait_for(lambda: not is_alive(helper))
