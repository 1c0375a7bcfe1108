"""`execute`'s program (kiln/protocol/codestubs.py) run as a real child process: the model's
code calls the view's tools as functions, each call an ask line as any tool's (TALKING.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kiln.protocol.backend import ToolView
from kiln.protocol.codestubs import execute_program
from kiln.runner.kiln_tools import call_key
from support.runner import Harness, Ran, run_beside_helper
from support.runner import harness_fixture as harness_fixture

OBJECT = {"type": "object"}
LOOKUP = ToolView(
    "lookup-price",
    "The price of a product, in pounds.",
    {**OBJECT, "properties": {"sku": {"type": "string"}}, "required": ["sku"]},
)
CONVERT = ToolView(
    "convert",
    "Convert pounds to another currency.",
    {
        **OBJECT,
        "properties": {
            "amount": {"type": "number"},
            "to": {"type": "string", "enum": ["JPY", "USD"]},
        },
        "required": ["amount", "to"],
    },
)
PRINT = ToolView("print", "A tool named like Python's print.", OBJECT)
VIEW = [LOOKUP, CONVERT, PRINT]
CODE = """
price = lookup_price(sku="A-1")
yen = convert(amount=price, to="JPY")
print(f"A-1 costs {yen} yen")
"""
FIRST = call_key(1, "lookup-price", {"sku": "A-1"})
SECOND = call_key(2, "convert", {"amount": 12.5, "to": "JPY"})


def text_result(text: str, *, error: bool = False) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": error}


def execute(where: Path, code: str, answers: dict[str, Any]) -> Ran:
    program, files = execute_program(VIEW)
    calls = [tool.name for tool in VIEW]
    return run_beside_helper(
        where, "python", program, answers, calls, files=files, arguments={"code": code}
    )


def test_the_code_s_calls_ask_one_round_at_a_time_and_then_its_prints_are_the_answer(
    tmp_path: Path,
) -> None:
    first = execute(tmp_path, CODE, {})
    assert (first.code, first.stdout) == (0, ""), first.stderr
    assert first.talk == [
        {"ask": FIRST, "call": {"name": "lookup-price", "arguments": {"sku": "A-1"}}}
    ]
    answers = {FIRST: text_result("12.5")}
    second = execute(tmp_path, CODE, answers)
    assert second.talk == [
        {"ask": SECOND, "call": {"name": "convert", "arguments": {"amount": 12.5, "to": "JPY"}}}
    ], second.stderr
    answers[SECOND] = {**text_result("2343.75"), "structuredContent": 2343.75}
    last = execute(tmp_path, CODE, answers)
    assert (last.code, last.stdout, last.stderr, last.talk) == (
        0,
        "A-1 costs 2343.75 yen\n",
        "",
        [],
    )


def test_print_stays_python_s_and_the_tool_named_print_is_print_(tmp_path: Path) -> None:
    code = "print(print_())\nprint(tools.call('print'))\n"
    answers = {
        call_key(1, "print", {}): text_result("first"),
        call_key(2, "print", {}): text_result("second"),
    }
    ran = execute(tmp_path, code, answers)
    assert (ran.stdout, ran.stderr) == ("first\nsecond\n", "")


def test_an_exception_in_the_code_is_a_short_traceback_of_its_own_lines_and_exit_1(
    tmp_path: Path,
) -> None:
    ran = execute(tmp_path, "x = 1\ny = x / 0\n", {})
    assert ran.code == 1
    told = [line for line in ran.stderr.splitlines() if line.strip("~^ ")]  # carets: 3.11+
    assert told == [
        "Traceback (most recent call last):",
        '  File "<execute>", line 2, in <module>',
        "    y = x / 0",
        "ZeroDivisionError: division by zero",
    ]


def test_a_failed_call_raises_tool_call_error_in_the_code(tmp_path: Path) -> None:
    failing = {FIRST: text_result("no product A-1", error=True)}
    ran = execute(tmp_path, CODE, failing)
    assert ran.code == 1
    assert ran.stderr.endswith("ToolCallError: no product A-1\n"), ran.stderr
    assert "kiln_view" not in ran.stderr
    assert "kiln_tools" not in ran.stderr.replace("kiln_tools.ToolCallError", "")
    caught = "try:\n    lookup_price(sku='A-1')\nexcept ToolCallError as e:\n    print('no:', e)\n"
    assert execute(tmp_path, caught, failing).stdout == "no: no product A-1\n"


def test_code_that_does_not_parse_says_where(tmp_path: Path) -> None:
    ran = execute(tmp_path, "print('a'\n", {})
    assert ran.code == 1
    assert ran.stderr.startswith('  File "<execute>", line 1\n'), ran.stderr
    assert "SyntaxError" in ran.stderr


def test_a_tool_outside_the_view_is_refused_without_asking(tmp_path: Path) -> None:
    ran = execute(tmp_path, "tools.call('delete_everything')\n", {})
    assert ran.talk == []
    assert ran.stderr.endswith(
        "ToolCallError: this tool may not call 'delete_everything': it calls only the tools "
        'its manifest declares in "calls" (here: lookup-price, convert, print)\n'
    )


@pytest.mark.parametrize("model", ["uid-per-run", "shared-uid"])
def test_execute_runs_through_the_runner_with_its_stubs_beside_it(
    harness: Harness, model: str
) -> None:
    runner = harness.with_settings(run_uids=None) if model == "shared-uid" else harness
    program, files = execute_program(VIEW)
    names = tuple(tool.name for tool in VIEW)
    answers = {FIRST: text_result("12.5"), SECOND: text_result("2343.75")}
    arguments = {"code": CODE}
    result = runner.run(program, files=files, arguments=arguments, answers=answers, calls=names)
    assert (result.exit_code, result.stdout) == (0, "A-1 costs 2343.75 yen\n"), result.stderr
    harness.assert_clean()
