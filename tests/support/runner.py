"""Helpers for runner tests: a harness around Runner, and /proc checks for leftovers.

The `harness` fixture lives here, not in a conftest.py: a second conftest.py in a directory
without __init__.py would replace the `conftest` module that other tests import from.
Test modules import it (`harness_fixture as harness_fixture`) to use `harness`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from kiln.runner import Runner, RunnerSettings, RunRequest, RunResult, contract_text
from kiln.runner.model import Language
from kiln.runner.nodejs import find_node
from kiln.runner.processes import descendants, processes_of_uids
from kiln.runner.shipped import write_run_files

MARKER_VAR = "RUN_TEST_MARKER"


def processes_carrying(marker: str) -> list[int]:
    """Live processes whose environment or command line holds `marker`."""
    found = []
    needle = marker.encode()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        for part in ("environ", "cmdline"):
            try:
                data = Path(f"/proc/{name}/{part}").read_bytes()
            except OSError:
                continue
            if needle in data:
                found.append(int(name))
                break
    return found


def is_alive(pid: int) -> bool:
    """True when `pid` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 :][:1] != b"Z"


def wait_for(predicate: Any, timeout_s: float = 5.0) -> None:
    give_up = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > give_up:
            raise AssertionError(f"condition not met within {timeout_s} s")
        time.sleep(0.01)


def live_descendants(pid: int | None) -> list[int]:
    if pid is None:
        return []
    return [p for p, state in descendants(pid) if state not in (b"Z", b"X")]


@dataclass
class Harness:
    """A Runner with a private work root, and a marker every run's processes carry.

    A forked Python script keeps the helper's original environment in /proc/PID/environ,
    so the marker finds exec'd processes (node, sleep, a subprocess); forked ones are found
    as descendants of the runner's helper, which has none while no run is in flight.
    """

    work_root: Path
    shared: Path  # a directory scripts may write pid files to; outlives the run
    settings: RunnerSettings
    marker: str = field(default_factory=lambda: f"kiln-test-{uuid.uuid4().hex}")
    runners: list[Runner] = field(default_factory=list)  # every runner of this test
    runner: Runner = field(init=False)

    def __post_init__(self) -> None:
        self.runner = Runner(self.settings)
        self.runners.append(self.runner)

    def request(self, code: str, language: Language = "python", **fields: Any) -> RunRequest:
        fields.setdefault("arguments", {})
        fields.setdefault("timeout_s", 10.0)
        env = {MARKER_VAR: self.marker, "SHARED_DIR": str(self.shared)}
        env.update(fields.pop("extra_env", {}))
        return RunRequest(language=language, code=code, extra_env=env, **fields)

    @property
    def standby(self) -> bool:
        return self.settings.standby_runs > 0

    def run(self, code: str, language: Language = "python", **fields: Any) -> RunResult:
        """One run; with standbys, of a run prepared before the call (and none left after)."""
        request = self.request(code, language, **fields)
        if not self.standby:
            return asyncio.run(self.runner.run(request))
        try:
            prepared = self.runner.prepare(request)  # False where runs are not fenced apart
            result = asyncio.run(self.runner.run(request))
            assert result.standby or not prepared or not result.started, "standby not used"
            return result
        finally:
            self.runner.discard_standbys()

    def text(self, code: str, language: Language = "python", **fields: Any) -> str:
        return contract_text(self.run(code, language, **fields))

    def leftovers(self) -> list[int]:
        """Processes of this test's runs still alive (supervisors exit within moments)."""
        found = set(processes_carrying(self.marker))
        for runner in self.runners:
            found.update(live_descendants(runner.helper_pid))
        if os.geteuid() == 0 and self.settings.run_uids is not None:
            found.update(processes_of_uids(*self.settings.run_uids))
        return sorted(found)

    def assert_clean(self) -> None:
        """No process of any run alive, no run directory left, and a normal call works."""
        self.runner.discard_standbys()  # what waits for a next call is not left of a run
        wait_for(lambda: not live_descendants(self.runner.helper_pid), timeout_s=2.0)
        assert self.leftovers() == []
        assert list(self.work_root.iterdir()) == []
        ok = self.run(
            "import json, sys\nprint(json.dumps(json.load(sys.stdin)))", arguments={"a": 1}
        )
        assert contract_text(ok) == '{"a": 1}'
        assert list(self.work_root.iterdir()) == []

    def with_settings(self, **changes: Any) -> Harness:
        settings = replace(self.settings, **changes)
        return Harness(self.work_root, self.shared, settings, self.marker, self.runners)


def private_uid_range(size: int = 64) -> tuple[int, int]:
    """Run uids no other test process on this machine is likely to use at the same time.

    Servers never share a uid (each holds a lock), but a test that looks for leftovers by
    uid must not see another test's runs.
    """
    first = 1_000_000 + random.randrange(100_000) * size
    return first, first + size


def harness_python() -> Path:
    """This interpreter by another of its names in the same bin directory.

    Runners share one helper per interpreter path; servers other tests build in this process
    (with standbys waiting in them) use sys.executable, and must not count as this test's
    leftovers.
    """
    current = Path(sys.executable)
    for name in ("python3", "python", f"python{sys.version_info[0]}.{sys.version_info[1]}"):
        other = current.with_name(name)
        if name != current.name and other.exists():
            return other
    return current


def test_settings(work_root: Path, shared: Path) -> RunnerSettings:
    """Runner settings for a test: its own uid range, and a directory runs share with it."""
    shared.chmod(0o1777)  # runs of other uids write pid files here
    return RunnerSettings(
        work_root=work_root,
        run_uids=private_uid_range(),
        shared_dirs=(shared,),
        python_executable=harness_python(),
    )


@pytest.fixture(name="harness", params=["cold", "standby"])
def harness_fixture(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Harness]:
    """Every runner test twice: runs prepared on their call, and runs prepared before it."""
    work_root = tmp_path / "runs"
    shared = tmp_path / "shared"
    work_root.mkdir()
    shared.mkdir()
    settings = test_settings(work_root, shared)
    if request.param == "standby":
        settings = replace(settings, standby_runs=4)
    h = Harness(work_root, shared, settings)
    yield h
    for runner in h.runners:
        runner.discard_standbys()
    # Whatever a test did, nothing it started may survive it. A supervisor answers before it
    # has exited (it closes its pipes first), so give the last one a moment to be reaped.
    deadline = time.monotonic() + 2.0
    while (leftovers := h.leftovers()) and time.monotonic() < deadline:
        time.sleep(0.01)
    for pid in leftovers:
        with contextlib.suppress(OSError):
            os.kill(pid, 9)
    for runner in h.runners:
        runner.close()
    assert leftovers == [], f"processes survived the test: {leftovers}"


@dataclass
class Ran:
    code: int
    stdout: str
    stderr: str
    talk: list[dict[str, Any]]  # the JSON lines it wrote on its talk channel


def run_beside_helper(
    where: Path,
    language: Language,
    code: str,
    answers: dict[str, Any],
    calls: list[str] | None,
    *,
    files: dict[str, bytes] | None = None,
    arguments: dict[str, Any] | None = None,
) -> Ran:
    """A script laid out as the runner lays it out (its files, then kiln_tools), run as a
    plain child process with a pipe at KILN_TALK_FD: what it says there, to the byte."""
    write_run_files(where, files or {}, language)
    script = where / ("main.py" if language == "python" else "main.cjs")
    script.write_text(code)
    command = [sys.executable] if language == "python" else [str(find_node())]
    read, write = os.pipe()
    env = {"PATH": os.environ["PATH"], "KILN_TALK_FD": str(write)}
    env["KILN_ANSWERS"] = json.dumps(answers)
    if calls is not None:
        env["KILN_CALLS"] = json.dumps(calls)
    with open(read, "rb") as talk:
        try:
            done = subprocess.run(
                [*command, str(script)],
                cwd=where,
                env=env,
                pass_fds=(write,),
                input=json.dumps(arguments or {}).encode(),
                capture_output=True,
                timeout=30,
                check=False,
            )
        finally:
            os.close(write)
        lines = talk.read().decode().splitlines()
    talked = [json.loads(line) for line in lines]
    return Ran(done.returncode, done.stdout.decode(), done.stderr.decode(), talked)
