"""Standbys: a run prepared before its call, used only by an identical run, never run unasked.

Every other runner test also runs with standbys (the `harness` fixture's "standby" half);
these tests are about the standbys themselves.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import signal
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from kiln.runner import RunResult, afterwards
from support.runner import Harness, live_descendants, wait_for
from support.runner import test_settings as settings_for_test

ECHO = """
import json, os, sys
args = json.load(sys.stdin)
print(json.dumps({"args": args, "token": os.environ.get("TOKEN")}))
"""
# Leaves a mark in the shared directory the moment a line of it runs.
MARK_PY = (
    "import os\nopen(os.path.join(os.environ['SHARED_DIR'], 'ran'), 'w').close()\nprint('ran')\n"
)
MARK_NODE = (
    "const fs = require('node:fs');\n"
    "fs.writeFileSync(require('node:path').join(process.env.SHARED_DIR, 'ran'), '');\n"
    "console.log('ran');\n"
)


@pytest.fixture
def standby(tmp_path: Path) -> Iterator[Harness]:
    work_root, shared = tmp_path / "runs", tmp_path / "shared"
    work_root.mkdir()
    shared.mkdir()
    settings = replace(settings_for_test(work_root, shared), standby_runs=2)
    h = Harness(work_root, shared, settings)
    yield h
    for runner in h.runners:
        runner.close()
    assert h.leftovers() == []
    assert list(work_root.iterdir()) == []


def call(h: Harness, code: str, language: str = "python", **fields: object) -> RunResult:
    return asyncio.run(h.runner.run(h.request(code, language, **fields)))  # type: ignore[arg-type]


def test_the_second_call_of_a_tool_starts_from_the_standby_its_first_call_left(
    standby: Harness,
) -> None:
    first = call(standby, "print('hello')")
    standby.runner.settle()
    assert standby.runner.standbys == 1
    second = call(standby, "print('hello')")
    assert (first.standby, second.standby) == (False, True)
    assert first.stdout == second.stdout == "hello\n"
    assert second.isolation == first.isolation != ""


@pytest.mark.parametrize(
    ("language", "code"), [("python", "print('hi')"), ("node", "console.log('hi')")]
)
def test_prepare_returns_once_the_standby_waits_for_its_call(
    standby: Harness, language: str, code: str
) -> None:
    """A save's warm-up (`prepare`) returns once the script has started and waits for its
    call (Node up to its preload, Python compiled), not once it is merely launched: the call
    that follows finds it ready."""
    request = standby.request(code, language)
    assert standby.runner.prepare(request)
    result = asyncio.run(standby.runner.run(request))
    assert (result.stdout, result.standby, result.ready) == ("hi\n", True, True), result.stderr
    standby.runner.settle()  # the standby a call leaves is not waited for: only a warm-up's
    again = asyncio.run(standby.runner.run(request))
    assert (again.stdout, again.standby) == ("hi\n", True), again.stderr


def test_prepare_waits_for_the_standby_a_call_left_to_be_ready(standby: Harness) -> None:
    """A warm-up finding a standby that a call left (made without waiting: Node may still be
    starting) waits until its script is ready too (a save that changed no code)."""
    request = standby.request("console.log('hi')", "node")
    first = asyncio.run(standby.runner.run(request))
    standby.runner.settle()  # the call's standby waits now, not seen ready
    assert standby.runner.prepare(request)
    assert standby.runner.standbys == 1
    second = asyncio.run(standby.runner.run(request))
    assert (first.standby, second.standby, second.ready) == (False, True, True), second.stderr


def test_a_standby_gets_each_calls_own_arguments_and_settings(standby: Harness) -> None:
    request = standby.request(ECHO, extra_env={"TOKEN": "one"}, arguments={"n": 1})
    assert standby.runner.prepare(request)
    first = asyncio.run(standby.runner.run(request))
    standby.runner.settle()
    second = call(standby, ECHO, extra_env={"TOKEN": "two"}, arguments={"n": 2})
    assert (first.standby, second.standby) == (True, True)
    assert first.stdout.strip() == '{"args": {"n": 1}, "token": "one"}'
    assert second.stdout.strip() == '{"args": {"n": 2}, "token": "two"}'


def test_a_standby_waiting_longer_than_the_timeout_still_gets_the_whole_timeout(
    standby: Harness,
) -> None:
    code = "import time\ntime.sleep(0.3)\nprint('done')\n"
    request = standby.request(code, timeout_s=2.0)
    assert standby.runner.prepare(request)
    # Waiting in a standby is not running: the deadline starts with the call. (The sleep is
    # the scenario, not a wait for something to happen.)
    time.sleep(2.2)
    result = asyncio.run(standby.runner.run(request))
    assert (result.standby, result.timed_out, result.stdout) == (True, False, "done\n")


def test_a_changed_tool_never_runs_the_standby_of_its_old_code(standby: Harness) -> None:
    assert standby.runner.prepare(standby.request("print('old')"))
    result = call(standby, "print('new')")
    assert (result.standby, result.stdout) == (False, "new\n")
    files = call(standby, "print(open('data.txt').read())", files={"data.txt": b"v2"})
    assert (files.standby, files.stdout) == (False, "v2\n")


@pytest.mark.parametrize(("language", "code"), [("python", MARK_PY), ("node", MARK_NODE)])
def test_a_discarded_standby_never_runs_a_line_of_its_tool(
    standby: Harness, language: str, code: str
) -> None:
    request = standby.request(code, language)  # type: ignore[arg-type]
    assert standby.runner.prepare(request)
    standby.runner.discard_standbys()
    assert standby.runner.standbys == 0
    assert not (standby.shared / "ran").exists()
    wait_for(lambda: live_descendants(standby.runner.helper_pid) == [])  # the supervisor exits
    assert list(standby.work_root.iterdir()) == []
    ran = asyncio.run(standby.runner.run(request))  # the same tool, called: it runs
    assert (ran.standby, ran.stdout, (standby.shared / "ran").exists()) == (False, "ran\n", True)


def test_a_standby_that_gave_up_waiting_is_replaced_by_a_cold_run(tmp_path: Path) -> None:
    work_root, shared = tmp_path / "runs", tmp_path / "shared"
    work_root.mkdir()
    shared.mkdir()
    settings = replace(settings_for_test(work_root, shared), standby_runs=2, standby_idle_s=1.0)
    h = Harness(work_root, shared, settings)
    try:
        assert h.runner.prepare(h.request("print('late')"))
        wait_for(lambda: len(live_descendants(h.runner.helper_pid)) == 2)  # made (it takes a fork)
        # The supervisor gives up by itself after standby_idle_s without a call.
        wait_for(lambda: live_descendants(h.runner.helper_pid) == [], timeout_s=5)
        result = call(h, "print('late')")
        assert (result.standby, result.stdout, result.runner_error) == (False, "late\n", None)
    finally:
        h.runner.close()
    assert h.leftovers() == []
    assert list(work_root.iterdir()) == []


def test_a_killed_standby_is_replaced_by_a_cold_run(standby: Harness) -> None:
    assert standby.runner.prepare(standby.request("print('again')"))
    # Its supervisor and the script waiting for the call (the helper forks them as it can).
    wait_for(lambda: len(live_descendants(standby.runner.helper_pid)) == 2)
    waiting = live_descendants(standby.runner.helper_pid)
    for pid in waiting:
        # The script may already be gone with its supervisor (reaped before its turn).
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    wait_for(lambda: live_descendants(standby.runner.helper_pid) == [])
    result = call(standby, "print('again')")
    assert (result.standby, result.stdout, result.runner_error) == (False, "again\n", None)


def test_standbys_are_capped_the_oldest_discarded_first(standby: Harness) -> None:
    for n in range(3):
        assert standby.runner.prepare(standby.request(f"print({n})"))
    assert standby.runner.standbys == 2
    # Two supervisors and two scripts: the oldest's are gone.
    wait_for(lambda: len(live_descendants(standby.runner.helper_pid)) == 4)
    oldest, newest = call(standby, "print(0)"), call(standby, "print(2)")
    assert (oldest.standby, newest.standby) == (False, True)


def test_closing_the_runner_leaves_no_standby_behind(standby: Harness) -> None:
    assert standby.runner.prepare(standby.request("print('a')"))
    assert standby.runner.prepare(standby.request("console.log('b')", "node"))
    helper = standby.runner.helper_pid
    standby.runner.close()
    wait_for(lambda: live_descendants(helper) == [])
    assert list(standby.work_root.iterdir()) == []


def test_runs_that_are_not_fenced_apart_get_no_standby(standby: Harness) -> None:
    # The server's uid, no Landlock: a waiting run would sit beside another tool's script.
    unfenced = standby.with_settings(run_uids=None, landlock=False)
    assert not unfenced.runner.prepare(unfenced.request("print('x')"))
    result = call(unfenced, "print('x')")
    unfenced.runner.settle()
    assert (result.standby, unfenced.runner.standbys) == (False, 0)


def test_standbys_are_discarded_when_the_server_holds_more_than_1024_descriptors(
    standby: Harness,
) -> None:
    """A busy server (kiln dev allows 1,000 connections) has descriptors past select's limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1400:
        pytest.skip("the descriptor limit is below what the test needs")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1400), hard))
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        assert standby.runner.prepare(standby.request("print('many')"))  # its pipes past 1,024
        standby.runner.discard_standbys()
        assert standby.runner.standbys == 0
        result = call(standby, "print('many')")
        assert (result.stdout, result.runner_error) == ("many\n", None)
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_run_that_ends_after_its_runner_closed_still_leaves_nothing(standby: Harness) -> None:
    """A server shutting down closes its runner while calls are still ending: each cleans up
    after itself, and no standby is made for it."""
    code = (
        "import os, time\nopen(os.path.join(os.environ['SHARED_DIR'], 'running'), 'w').close()\n"
        "time.sleep(0.5)\nprint('late')\n"
    )

    async def close_during_the_run() -> RunResult:
        run = asyncio.create_task(standby.runner.run(standby.request(code)))
        while not (standby.shared / "running").exists():
            assert not run.done(), run.result()
            await asyncio.sleep(0.01)
        standby.runner.close()
        return await run

    result = asyncio.run(close_during_the_run())
    assert (result.stdout, result.runner_error) == ("late\n", None)
    assert list(standby.work_root.iterdir()) == []  # removed before the answer, as without standbys
    assert standby.runner.standbys == 0


def test_a_run_in_a_request_leaves_its_next_standby_and_clean_up_for_after_the_answer(
    standby: Harness,
) -> None:
    """Preparing the tool's next run and removing this one's files start once the answer has
    been sent (kiln.runner.afterwards), so that neither competes with the answer."""

    async def in_a_request() -> tuple[RunResult, int, int]:
        with afterwards.answering() as kept:
            result = await standby.runner.run(standby.request("print('hi')"))
            await asyncio.sleep(0.2)  # the answer is being written: nothing has started
            return result, len(kept), standby.runner.standbys

    result, kept, waiting = asyncio.run(in_a_request())
    assert result.stdout == "hi\n", result
    assert kept == 1, "the run's after-work was not kept for after the answer"
    assert waiting == 0, "the next standby was made before the answer was sent"
    standby.runner.settle()
    assert standby.runner.standbys == 1
    assert call(standby, "print('hi')").standby
