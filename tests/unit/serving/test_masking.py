"""The call path masks the connection tokens it handed a run in everything the run says."""

from __future__ import annotations

from typing import Any

from kiln.protocol.backend import Conversation
from kiln.runner.model import RunResult
from kiln.runner.talk import Ask
from kiln.serving.masking import Masker

TOKEN = "gho_abcdefghijklmnop"
LONGER = TOKEN + "-and-more"


def test_each_token_is_replaced_by_its_variables_name_the_longest_first() -> None:
    mask = Masker({"KILN_CONNECTION_A": TOKEN, "KILN_CONNECTION_B": LONGER})
    assert mask.text(f"a {TOKEN} b {LONGER}") == "a [KILN_CONNECTION_A] b [KILN_CONNECTION_B]"


def test_a_value_too_short_to_be_a_token_masks_nothing() -> None:
    mask = Masker({"KILN_CONNECTION_A": "abc"})
    assert not mask
    assert mask.text("abc abc") == "abc abc"


def test_a_runs_output_error_output_and_questions_are_masked() -> None:
    mask = Masker({"KILN_CONNECTION_A": TOKEN})
    result = RunResult(
        stdout=f'{{"token": "{TOKEN}"}}', stderr=f"used {TOKEN}", exit_code=0, timed_out=False,
        applied_timeout_s=1.0, duration_s=0.1,
        asks=(Ask("k", "elicitation", {"message": f"is {TOKEN} yours?", "n": [TOKEN, 1]}),),
    )  # fmt: skip
    masked = mask.result(result)
    assert masked.stdout == '{"token": "[KILN_CONNECTION_A]"}'
    assert masked.stderr == "used [KILN_CONNECTION_A]"
    assert masked.asks[0].params == {
        "message": "is [KILN_CONNECTION_A] yours?",
        "n": ["[KILN_CONNECTION_A]", 1],
    }


def test_progress_and_log_lines_are_heard_masked() -> None:
    heard: list[tuple[str, Any]] = []
    talk = Conversation(hear=lambda kind, data: heard.append((kind, data)))
    masked = Masker({"KILN_CONNECTION_A": TOKEN}).conversation(talk)
    assert masked is not None
    assert masked.hear is not None
    masked.hear("log", {"level": "warning", "data": {TOKEN: [f"x{TOKEN}"]}})
    assert heard == [("log", {"level": "warning", "data": {"[KILN_CONNECTION_A]": [
        "x[KILN_CONNECTION_A]"]}})]  # fmt: skip
    assert Masker({}).conversation(None) is None
