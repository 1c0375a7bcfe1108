"""The runner function's answer read as untrusted input: its shape is checked strictly, its
questions and lines by the talk channel's rules, and what kept the run apart is never taken
from it (the answer can be posted by any process of the runner's environment)."""

from __future__ import annotations

import dataclasses
import json
import logging
from typing import Any

import pytest

from kiln.runner import RunResult
from kiln.runner.answer import MAX_ANSWER_BYTES, RUNNER_FUNCTION_HOLDS, read_answer
from kiln.runner.remote import result_json
from kiln.runner.talk import Ask, Log, Progress

RESULT = RunResult(stdout="hi\n", stderr="", exit_code=0, timed_out=False, applied_timeout_s=7.0,
                   duration_s=0.1, isolation="shared", mark="none")  # fmt: skip
SECRET = "forged-value-8d1f"


def answer(talk: Any = (), swept: Any = None, **result: Any) -> dict[str, Any]:
    sent = {"result": {**result_json(RESULT), **result}, "talk": list(talk)}
    if swept is not None:
        sent["swept"] = swept
    return sent


def read(sent: Any) -> Any:
    return read_answer(json.dumps(sent).encode())


def refusal(sent: Any) -> str:
    got = read(sent)
    assert isinstance(got, str), got
    assert SECRET not in got, got  # a problem is named, never echoed
    return got


def test_the_runner_functions_own_answer_is_read_as_it_was_sent() -> None:
    swept = {"killed": 0, "alive": 0, "removed": 1, "pid": 8}
    talk = [{"progress": 1, "total": 2, "message": "half"}, {"log": "info", "data": {"k": 1}}]
    asked = [{"key": "account", "kind": "elicitation", "params": {"message": "?"}}]
    got = read(answer(talk, swept, asks=asked))
    assert not isinstance(got, str), got
    result, said, left_out = got
    asks = (Ask("account", "elicitation", {"message": "?"}),)
    assert result == dataclasses.replace(RESULT, asks=asks)
    assert said == [Progress(1, 2, "half"), Log("info", {"k": 1})]
    assert left_out == 0


@pytest.mark.parametrize(
    ("sent", "problem"),
    [
        (answer(isolation_proof=SECRET), "result.isolation_proof: Extra inputs are not permitted"),
        ({**answer(), "signed_by": SECRET}, "signed_by: Extra inputs are not permitted"),
        (answer(exit_code="0"), "result.exit_code: Input should be a valid integer"),
        (answer(timed_out=1), "result.timed_out: Input should be a valid boolean"),
        (answer(stdout=None), "result.stdout: Input should be a valid string"),
        (answer(limit_source=SECRET), "result.limit_source: Input should be 'tool', 'invocation'"),
        (answer(duration_s=-1), "result.duration_s: Input should be greater than or equal to 0"),
        (answer(stdout_bytes=-5), "result.stdout_bytes: Input should be greater than or equal"),
        (answer(isolation=SECRET * 20), "result.isolation: String should have at most 200"),
        (answer(asks=[{"key": "k", "kind": "roots"}]), "result.asks.0.params: Field required"),
        (
            answer(asks=[{"key": "k", "kind": "roots", "params": {}}] * 17),
            "result.asks: List should have at most 16 items",
        ),
        (answer(talk_problems=["x"] * 6), "result.talk_problems: List should have at most 5"),
        (answer([7]), "talk.0: Input should be a valid dictionary"),
        (answer([{}] * 1001), "talk: List should have at most 1000 items"),
        (answer(swept={"killed": "all"}), "swept.killed: Input should be a valid integer"),
        ({"talk": []}, "result: Field required"),
        ([answer()], "(answer): Input should be a valid dictionary"),
        ({"error": 5}, "error: Input should be a valid string"),
        ({"error": "no", "result": result_json(RESULT)}, "result: Extra inputs are not permitted"),
    ],
)
def test_a_field_that_is_unknown_mistyped_or_past_its_cap_refuses_the_answer(
    sent: Any, problem: str
) -> None:
    assert problem in refusal(sent)


def test_a_non_finite_number_refuses_the_answer() -> None:
    data = json.dumps(answer()).replace('"duration_s": 0.1', '"duration_s": NaN').encode()
    got = read_answer(data)
    assert isinstance(got, str), got
    assert "result.duration_s: Input should be a finite number" in got


def test_an_answer_that_is_not_json_or_too_large_is_refused() -> None:
    assert "it is not JSON" in str(read_answer(b"{forged"))
    huge = json.dumps(answer(stdout="x" * MAX_ANSWER_BYTES)).encode()
    assert f"more than the {MAX_ANSWER_BYTES} Lambda sends" in str(read_answer(huge))


@pytest.mark.parametrize(
    ("asks", "problem"),
    [
        (
            [{"key": "kiln/approval", "kind": "elicitation", "params": {"message": "ok?"}}],
            'result.asks.0 "ask" keys starting with "kiln/" are Kiln\'s own',
        ),
        (
            [{"key": "k", "kind": "shell", "params": {}}],
            'result.asks.0 an ask holds "ask" and exactly one of',
        ),
        ([{"key": "", "kind": "roots", "params": {}}], 'result.asks.0 "ask" must be a key of 1'),
    ],
)
def test_a_question_that_breaks_the_talk_rules_refuses_the_answer(
    asks: list[dict[str, Any]], problem: str
) -> None:
    assert problem in refusal(answer(asks=asks))


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ({"ask": "kiln/approval", "elicitation": {}}, 'talk.0 "ask" keys starting with "kiln/"'),
        ({"ask": "account", "roots": {}}, "talk.0 is not a progress or log line"),
        ({"task": True}, "talk.0 is not a progress or log line"),
        ({"log": "loud", "data": SECRET}, 'talk.0 "log" must be one of debug'),
        ({"log": "info", "data": 1, "logger": 5}, 'talk.0 "logger" must be a string'),
        ({"log": "info", "data": 1, "kiln": True}, "talk.0 a log line holds only"),
        ({"progress": "lots"}, 'talk.0 "progress" (and "total", when given) must be finite'),
    ],
)
def test_a_talk_line_that_breaks_the_talk_rules_refuses_the_answer(
    line: dict[str, Any], problem: str
) -> None:
    assert problem in refusal(answer([line]))


def test_a_log_line_of_the_answer_is_never_kilns_own_whatever_its_logger() -> None:
    got = read(answer([{"log": "warning", "data": "your key again", "logger": "kiln"}]))
    assert not isinstance(got, str), got
    assert got[1] == [Log("warning", "your key again", "kiln", kiln=False)]


def test_what_kept_the_run_apart_is_never_taken_from_the_answer(
    caplog: pytest.LogCaptureFixture,
) -> None:
    forged = {"isolation": "mounts", "fence": "landlock/7:files", "mark": "seccomp"}
    with caplog.at_level(logging.WARNING, logger="kiln.runner.answer"):
        got = read(answer(**forged, standby=True, ready=True))
    assert not isinstance(got, str), got
    result = got[0]
    assert (result.isolation, result.fence, result.mark) == ("shared", "", "none")
    assert RUNNER_FUNCTION_HOLDS == {"isolation": "shared", "fence": "", "mark": "none"}
    assert (result.standby, result.ready) == (False, False)
    (record,) = [r for r in caplog.records if r.name == "kiln.runner.answer"]
    assert "claims what no run there gets" in record.getMessage()
    assert record.claimed == forged  # type: ignore[attr-defined]


def test_a_run_that_never_started_reports_no_isolation_and_no_claim(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="kiln.runner.answer"):
        got = read(answer(started=False, exit_code=None, isolation="", mark="", fence=""))
    assert not isinstance(got, str), got
    assert (got[0].isolation, got[0].fence, got[0].mark) == ("", "", "")
    assert not [r for r in caplog.records if r.name == "kiln.runner.answer"]
