"""The runner function's handler in-process (as `kiln dev`'s machine runs it, root here: a
uid per run): one tenant per environment, the doctor payload, the sweep after each run.
Under Lambda's restrictions it is driven in tests/e2e/test_lambda_profile.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kiln.runner import RunnerSettings, RunRequest
from kiln.runner.remote import encode, result_from
from kiln.serving.runner_function import RunnerFunction
from support.runner import private_uid_range

FUNCTIONS = Path(__file__).resolve().parents[3] / "functions"


@dataclass
class Context:
    tenant_id: str | None = None

    def get_remaining_time_in_millis(self) -> int:
        return 20_000


@pytest.fixture
def function(tmp_path: Any) -> Iterator[RunnerFunction]:
    settings = RunnerSettings(run_uids=private_uid_range(), work_root=tmp_path)
    made = RunnerFunction(settings, s3=None, bucket="unused")
    yield made
    made.close()


def payload(tenant: str, code: str = "print('ran')") -> dict[str, Any]:
    request = RunRequest(language="python", code=code, arguments={}, timeout_s=10)
    return encode(request, tenant=tenant, tool_id=tenant, bundle=None)


def test_an_environment_serves_one_tenant_only(function: RunnerFunction) -> None:
    first = function.handle(payload("tool-a"), Context("tool-a"))
    assert result_from(first["result"]).stdout == "ran\n"
    assert function.handle(payload("tool-b"), Context(None)) == {
        "error": "this environment serves another tenant"
    }
    assert function.handle(payload("tool-a"), Context("tool-b")) == {
        "error": "the payload's tenant is not this environment's"
    }
    refused = function.handle({"kiln_run": 1}, Context())
    assert refused["error"].startswith("a run payload without a usable"), refused


def test_a_doctor_payload_answers_the_probe(function: RunnerFunction) -> None:
    found = function.handle({"kiln_doctor": 1}, Context())["doctor"]
    assert found["kernel"] == os.uname().release
    assert found["runs"]["isolation"] in ("mounts", "uid", "landlock", "shared")


SWEEPER = """
import json, subprocess
from kiln.runner import contain, sweep
companion = subprocess.Popen(["sleep", "30"])  # there before any run: an extension
before = sweep.census()
kept = subprocess.Popen(["sleep", "30"])
strays = [subprocess.Popen(["sh", "-c", "sleep 30 & sleep 30"]) for _ in range(2)]
killed, alive = sweep.kill_all_but([kept.pid], before)
states = {"kept": contain.state_of(kept.pid).decode(),
          "companion": contain.state_of(companion.pid).decode(),
          "strays": [contain.state_of(s.pid).decode() for s in strays]}
kept.kill()
companion.kill()
print(json.dumps({"killed": killed, "alive": alive, **states}))
"""


def test_the_sweep_kills_all_but_what_it_keeps_and_never_beyond_its_own_tree_as_root() -> None:
    """In a process of its own: as root it kills its own descendants, here every one of them
    but the kept one (never this test process, its parent)."""
    done = subprocess.run(
        [sys.executable, "-c", SWEEPER], capture_output=True, text=True, timeout=60, check=False,
        env={"PYTHONPATH": str(FUNCTIONS), "PATH": os.environ.get("PATH", "/usr/bin:/bin")},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["alive"] == 0
    assert report["killed"] >= 2  # the two shells, and their sleeps when already forked
    assert report["kept"] in ("S", "R"), report
    assert report["companion"] in ("S", "R"), report
    assert set(report["strays"]) <= {"X", "Z"}, report


def test_a_run_that_leaves_a_file_in_tmp_leaves_it_for_nobody(function: RunnerFunction) -> None:
    name = f"/tmp/kiln-runner-litter-{os.getpid()}-{time.monotonic_ns()}"
    answer = function.handle(payload("tool-a", f"open({name!r}, 'w').write('x')"), Context())
    assert result_from(answer["result"]).exit_code == 0
    assert not os.path.exists(name)
