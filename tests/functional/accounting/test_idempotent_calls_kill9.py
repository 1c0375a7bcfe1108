"""`kill -9` of a real `kiln dev` around a keyed call, then a restart on the same state: the
call's key still answers for it, and the tool never runs a second time."""

from __future__ import annotations

import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from functional.accounting.test_idempotent_calls import call, result_of, run_number
from support.devserver import AUTHOR_KEY, Served, clean_env, serving
from support.tally import TOOL, Tally, tally


@contextmanager
def dev(state: Path, **env: str) -> Iterator[Served]:
    command = [sys.executable, "-m", "kiln.cli", "dev", "--port", "0", "--state-dir", str(state),
               "--author-key", AUTHOR_KEY, "--no-examples"]  # fmt: skip
    environment = clean_env(KILN_RUN_TCP_PORTS="all", **env)
    with serving(command, state.parent / "dev.log", env=environment) as served:
        yield served


def rest(served: Served, method: str, path: str, **kw: Any) -> httpx.Response:
    headers = {"Authorization": f"Bearer {AUTHOR_KEY}"}
    return httpx.request(method, served.url + path, headers=headers, timeout=60, **kw)


def prepare(served: Served, tool: dict[str, Any] = TOOL) -> str:
    """The writing tool in the catalog, and a caller's key."""
    assert rest(served, "POST", "/api/tools", json=tool).status_code == 201
    made = rest(served, "POST", "/api/keys", json={"name": "alice"})
    assert made.status_code == 201, made.text
    key: str = made.json()["key"]
    return key


def kill(served: Served) -> None:
    served.process.kill()  # SIGKILL: nothing is flushed, nothing is said
    served.process.wait(timeout=30)


@pytest.fixture
def counter() -> Iterator[Tally]:
    with tally() as found:
        yield found


def log_tail(state: Path) -> str:
    return (state.parent / "dev.log").read_text(errors="replace")[-3000:]


def test_a_kill_9_after_the_answer_then_a_restart_still_answers_the_key_with_its_result(
    tmp_path: Path, counter: Tally
) -> None:
    state = tmp_path / "state"
    arguments, idem = {"url": counter.url, "label": "once"}, str(uuid.uuid4())
    with dev(state) as served:
        alice = prepare(served)
        first = call(served.url, alice, arguments, idem)
        kill(served)  # the ledger entry and the answer are written: nothing after them is
    assert run_number(first) == 1, first
    with dev(state) as served:
        answers = [call(served.url, alice, arguments, idem) for _ in range(19)]
        calls = rest(served, "GET", "/api/calls", params={"tool": "append_run"})
    assert counter.runs("once") == 1, log_tail(state)
    assert all(result_of(answer) == result_of(first) for answer in answers), answers
    assert calls.status_code == 200, calls.text
    assert [c["outcome"] for c in calls.json()["calls"]] == ["ok"], calls.json()  # one run


@pytest.mark.parametrize(
    ("annotations", "after_the_lease"),
    [
        ({}, "outcome_unknown"),  # a writing tool: it may have run, so never again
        ({"readOnlyHint": True}, "runs again"),  # harmless to repeat: the claim is taken over
    ],
)
def test_a_kill_9_during_the_run_runs_the_tool_again_only_if_it_says_that_is_harmless(
    tmp_path: Path, counter: Tally, annotations: dict[str, Any], after_the_lease: str
) -> None:
    state = tmp_path / "state"
    arguments, idem = {"url": counter.url, "label": "cut"}, str(uuid.uuid4())
    # A short local time budget: the dead call's claim has a lease of 6 + 5 s (and a run,
    # a Python start and a POST, has 6 s even on a loaded machine).
    env = {"KILN_LOCAL_TIME_BUDGET_S": "6", "KILN_IDEMPOTENCY_WAIT_S": "0"}
    counter.hold()
    counter.hits.clear()
    with dev(state, **env) as served:
        alice = prepare(served, {**TOOL, "annotations": annotations})
        answers: list[dict[str, Any] | None] = []
        sender = threading.Thread(
            target=lambda: answers.append(call(served.url, alice, arguments, idem))
        )
        sender.start()
        assert counter.hits.wait(60), log_tail(state)  # the tool is running: kill now
        kill(served)
        counter.release()
        sender.join(60)
    assert answers == [None], answers
    with dev(state, **env) as served:
        seen: list[str] = []
        deadline = time.monotonic() + 60
        while not seen or seen[-1] == "in_progress":
            assert time.monotonic() < deadline, seen
            answer = call(served.url, alice, arguments, idem)
            assert answer is not None
            seen.append(answer["error"]["data"]["reason"] if "error" in answer else "runs again")
            time.sleep(0.3)
        again = call(served.url, alice, arguments, idem)
    assert seen[-1] == after_the_lease, seen
    assert again is not None
    if after_the_lease == "outcome_unknown":
        assert again["error"]["data"]["reason"] == "outcome_unknown", again
        assert "it may have run, so it is not run again" in again["error"]["message"], again
        assert counter.runs("cut") == 1, log_tail(state)
    else:  # run once more, and that run's answer is the key's from now on
        assert run_number(again) == 2, f"{again}\n{log_tail(state)}"
        assert counter.runs("cut") == 2, log_tail(state)
