"""The runner function's handler (as `kiln dev`'s machine runs it, root here: a uid per run):
one tenant per environment, the doctor payload, the sweep after each run.
Under Lambda's restrictions it is driven in tests/e2e/test_lambda_profile.py.

The sweep takes the environment to be its own, as on Lambda: every handler here runs in a
world of its own (`support/private_world.py`: its own /tmp, /var/tmp, /dev/shm, /run/lock,
and pid namespace), so that it never removes another test's fresh files in /tmp nor kills
its processes; the last test shows that it does not.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kiln.runner import RunRequest
from kiln.runner.kiln_tools import call_key
from kiln.runner.remote import encode, result_from
from support import private_world
from support.runner import private_uid_range

FUNCTIONS = Path(__file__).resolve().parents[3] / "functions"
DRIVER = Path(__file__).resolve().parents[2] / "support" / "runner_function_driver.py"


class WorldOfItsOwn:
    """The runner function's handler in a world of its own (`runner_function_driver.py`)."""

    def __init__(self, log: Path, mode: str) -> None:
        self.log = log
        argv = [sys.executable, str(DRIVER), mode]
        with log.open("wb") as sink:
            self.process = subprocess.Popen(
                private_world.command(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=sink, text=True, env={**os.environ, "PYTHONPATH": str(FUNCTIONS)},
            )  # fmt: skip
        self.ready = self._reply()

    def _reply(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            code = self.process.wait(timeout=30)
            if code == private_world.NO_WORLD:
                pytest.skip(self.log.read_text())
            raise AssertionError(f"the driver exited ({code}): {self.log.read_text()}")
        reply: dict[str, Any] = json.loads(line)
        return reply

    def ask(self, request: dict[str, Any]) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        return self._reply()

    def handle(self, event: dict[str, Any], tenant: str | None = None) -> dict[str, Any]:
        return self.ask({"event": event, "tenant": tenant})

    def exists(self, path: str) -> bool:
        return bool(self.ask({"exists": [path]})["exists"][path])

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        finally:
            self.process.kill()
            if self.process.stdout is not None:
                self.process.stdout.close()


@pytest.fixture
def function(tmp_path: Path) -> Iterator[WorldOfItsOwn]:
    """As `kiln dev`'s machine runs it: a uid per run where it may switch uids."""
    low, high = private_uid_range()
    made = WorldOfItsOwn(tmp_path / "driver.log", f"{low}-{high}")
    yield made
    made.close()


@pytest.fixture
def shared(tmp_path: Path) -> Iterator[WorldOfItsOwn]:
    """As Lambda runs it where the kernel refuses Landlock: one uid, runs unfenced, so what a
    run leaves in /tmp stays there but for the sweep."""
    made = WorldOfItsOwn(tmp_path / "driver.log", "shared")
    yield made
    made.close()


def payload(tenant: str, code: str = "print('ran')") -> dict[str, Any]:
    request = RunRequest(language="python", code=code, arguments={}, timeout_s=10)
    return encode(request, tenant=tenant, tool_id=tenant, bundle=None)


def test_an_environment_serves_one_tenant_only(function: WorldOfItsOwn) -> None:
    first = function.handle(payload("tool-a"), "tool-a")
    assert result_from(first["result"]).stdout == "ran\n", first
    assert function.handle(payload("tool-b")) == {"error": "this environment serves another tenant"}
    assert function.handle(payload("tool-a"), "tool-b") == {
        "error": "the payload's tenant is not this environment's"
    }
    refused = function.handle({"kiln_run": 1})
    assert refused["error"].startswith("a run payload without a usable"), refused


def test_a_doctor_payload_answers_the_probe(function: WorldOfItsOwn) -> None:
    found = function.handle({"kiln_doctor": 1})["doctor"]
    assert found["kernel"] == os.uname().release
    assert found["runs"]["isolation"] in ("mounts", "uid", "landlock", "shared")


@pytest.mark.parametrize("world", ["function", "shared"])
def test_a_run_in_the_runner_function_finds_kiln_tools_beside_its_script(
    world: str, request: pytest.FixtureRequest
) -> None:
    """Nothing to install: the runner function lays out kiln_tools as `kiln dev` does."""
    answers = {
        call_key(1, "fx_rate", {"from": "GBP"}): {"content": [{"type": "text", "text": "1.5"}]}
    }
    code = "from kiln_tools import tools\nprint(tools.fx_rate(from_='GBP') * 2)"
    run = RunRequest(
        language="python",
        code=code,
        arguments={},
        timeout_s=10,
        answers=answers,
        calls=("fx_rate",),
    )
    handler: WorldOfItsOwn = request.getfixturevalue(world)  # a uid per run, or one uid
    answer = handler.handle(encode(run, tenant="tool-a", tool_id="tool-a", bundle=None), "tool-a")
    result = result_from(answer["result"])
    assert (result.stdout, result.stderr) == ("3.0\n", ""), answer


SWEEPER = """
import json, subprocess
from kiln.runner import processes, sweep
companion = subprocess.Popen(["sleep", "30"])  # there before any run: an extension
before = sweep.census()
kept = subprocess.Popen(["sleep", "30"])
strays = [subprocess.Popen(["sh", "-c", "sleep 30 & sleep 30"]) for _ in range(2)]
killed, alive = sweep.kill_all_but([kept.pid], before)
states = {"kept": processes.group_state(kept.pid).decode(),
          "companion": processes.group_state(companion.pid).decode(),
          "strays": [processes.group_state(s.pid).decode() for s in strays]}
kept.kill()
companion.kill()
print(json.dumps({"killed": killed, "alive": alive, **states}))
"""


def test_the_sweep_kills_all_but_what_it_keeps_and_never_beyond_its_own_tree_as_root() -> None:
    """In a process of its own: as root it kills its own descendants, here every one of them
    but the kept one (never this test process, its parent)."""
    done = subprocess.run(
        private_world.command([sys.executable, "-c", SWEEPER]),
        capture_output=True, text=True, timeout=60, check=False,
        env={"PYTHONPATH": str(FUNCTIONS), "PATH": os.environ.get("PATH", "/usr/bin:/bin")},
    )  # fmt: skip
    if done.returncode == private_world.NO_WORLD:
        pytest.skip(done.stderr)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["alive"] == 0
    assert report["killed"] >= 2  # the two shells, and their sleeps when already forked
    assert report["kept"] in ("S", "R"), report
    assert report["companion"] in ("S", "R"), report
    assert set(report["strays"]) <= {"X", "Z"}, report


def test_a_run_that_leaves_a_file_in_tmp_leaves_it_for_nobody(shared: WorldOfItsOwn) -> None:
    name = f"/tmp/kiln-runner-litter-{secrets.token_hex(6)}"
    code = f"open({name!r}, 'w').write('x'); import os; print(os.path.exists({name!r}))"
    answer = shared.handle(payload("tool-a", code))
    assert result_from(answer["result"]).stdout == "True\n", answer  # it was there
    assert "swept" in answer, answer
    assert not shared.exists(name), answer


def test_before_its_first_bundle_the_bundle_caches_folder_is_a_runs_litter(
    shared: WorldOfItsOwn,
) -> None:
    """The bundle cache is made by the first bundle (a plain tool's first call does not load
    its modules): until then nothing keeps its folder, and a run that makes it, a module
    planted where a bundle would be unpacked, leaves it for nobody."""
    planted = "/tmp/kiln-bundles/python-planted/shared_mod.py"
    code = (
        f"import os; os.makedirs(os.path.dirname({planted!r}), exist_ok=True); "
        f"open({planted!r}, 'w').write('VALUE = 1'); print('planted')"
    )
    answer = shared.handle(payload("tool-a", code))
    assert result_from(answer["result"]).stdout == "planted\n", answer
    assert not shared.exists("/tmp/kiln-bundles"), answer


def test_the_sweep_leaves_another_tests_fresh_entry_in_the_shared_tmp_alone(
    shared: WorldOfItsOwn,
) -> None:
    """Made after the handler's baseline, by this test's uid (as another test's `kiln dev`
    makes its runs' directories, root here): on Lambda it could only be a run's litter, but
    here it belongs to another test, and the handler's world does not hold it."""
    neighbour = tempfile.mkdtemp(prefix="kiln-run-neighbour-", dir="/tmp")
    try:
        litter = f"{neighbour}-litter"
        code = f"open({litter!r}, 'w').write('x'); import os; print(os.path.exists({litter!r}))"
        answer = shared.handle(payload("tool-a", code))
        assert result_from(answer["result"]).stdout == "True\n", answer
        assert not shared.exists(litter), answer  # the sweeps ran, and found the litter
        assert os.path.isdir(neighbour), "the sweep removed another test's fresh directory"
        assert not os.path.exists(litter)  # the run's file was never in this /tmp
    finally:
        shutil.rmtree(neighbour, ignore_errors=True)
