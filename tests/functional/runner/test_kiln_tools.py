"""kiln_tools, the helper every run finds beside its script: tools call tools by asking.

Two kinds of run: the script as a plain child process in a directory the runner's own
`write_run_files` filled, with a real pipe at KILN_TALK_FD (what the helper writes there, to
the byte); and the same scripts through the real Runner, in a uid of their own and in the
server's uid (runner/TALKING.md, "Calling tools").
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kiln.runner.kiln_tools import call_key
from kiln.runner.model import Language
from kiln.runner.shipped import write_run_files
from support.runner import Harness, run_beside_helper
from support.runner import harness_fixture as harness_fixture

RATE_ARGS = {"from": "GBP", "to": "JPY"}
RATE_KEY = "call:1:57904c1894d9"  # pinned: the same in both languages, on every run
FORMAT_ARGS = {"amount": 187.5, "currency": "JPY"}

PY = """
from kiln_tools import tools, ToolCallError
rate = tools.fx_rate(from_="GBP", to="JPY")
try:
    text = tools["fmt-money"](amount=rate, currency="JPY")
except ToolCallError as error:
    print("fmt-money failed:", error, error.result["isError"], error.name)
else:
    print(json.dumps({"rate": rate, "text": text}))
"""
PY = "import json\n" + PY
NODE = """
const { tools, ToolCallError } = require('./kiln_tools');
const rate = tools.fx_rate({from: 'GBP', to: 'JPY'});
let text;
try {
  text = tools['fmt-money']({amount: rate, currency: 'JPY'});
} catch (error) {
  if (!(error instanceof ToolCallError)) throw error;
  console.log('fmt-money failed:', error.message, error.result.isError, error.tool);
  process.exit(0);
}
console.log(JSON.stringify({rate, text}));
"""
SCRIPTS = {"python": PY, "node": NODE}


def text_result(text: str, *, error: bool = False) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": error}


RATE_ANSWER = {RATE_KEY: text_result("187.5")}
FORMAT_KEY = call_key(2, "fmt-money", FORMAT_ARGS)
BOTH = {
    **RATE_ANSWER,
    FORMAT_KEY: {**text_result("ignored"), "structuredContent": {"text": "¥187.50"}},
}


@pytest.fixture(params=["python", "node"])
def language(request: pytest.FixtureRequest) -> Language:
    chosen: Language = request.param
    return chosen


def test_a_first_run_asks_for_its_first_call_once_and_ends_with_exit_0(
    tmp_path: Path, language: Language
) -> None:
    ran = run_beside_helper(tmp_path, language, SCRIPTS[language], {}, ["fx_rate", "fmt-money"])
    assert (ran.code, ran.stdout) == (0, ""), ran.stderr
    assert ran.talk == [{"ask": RATE_KEY, "call": {"name": "fx_rate", "arguments": RATE_ARGS}}]
    assert call_key(1, "fx_rate", RATE_ARGS) == RATE_KEY


def test_a_run_with_the_first_answer_asks_the_second_and_with_both_prints_its_result(
    tmp_path: Path, language: Language
) -> None:
    second = run_beside_helper(tmp_path, language, SCRIPTS[language], RATE_ANSWER, None)
    assert (second.code, second.stdout) == (0, ""), second.stderr
    assert second.talk == [
        {"ask": FORMAT_KEY, "call": {"name": "fmt-money", "arguments": FORMAT_ARGS}}
    ]
    last = run_beside_helper(tmp_path, language, SCRIPTS[language], BOTH, None)
    assert last.code == 0, last.stderr
    assert last.talk == []
    assert json.loads(last.stdout) == {"rate": 187.5, "text": {"text": "¥187.50"}}


def test_an_error_result_raises_tool_call_error_which_the_script_may_catch(
    tmp_path: Path, language: Language
) -> None:
    answers = {**RATE_ANSWER, FORMAT_KEY: text_result("unknown currency JPX", error=True)}
    ran = run_beside_helper(tmp_path, language, SCRIPTS[language], answers, None)
    assert ran.code == 0, ran.stderr
    assert ran.talk == []
    true = "True" if language == "python" else "true"
    assert ran.stdout == f"fmt-money failed: unknown currency JPX {true} fmt-money\n"


@pytest.mark.parametrize(
    ("language", "code"),
    [
        (
            "python",
            "from kiln_tools import tools\ntry:\n    tools.fx_rate(from_='GBP', to='JPY')\n"
            "except BaseException:\n    print('swallowed')\nfinally:\n    print('finally')\n",
        ),
        (
            "node",
            "const { tools } = require('./kiln_tools');\n"
            "try { tools.fx_rate({from: 'GBP', to: 'JPY'}); }\n"
            "catch (e) { console.log('swallowed'); } finally { console.log('finally'); }\n",
        ),
    ],
)
def test_no_try_of_the_script_swallows_the_end_of_a_run_that_asked(
    tmp_path: Path, language: Language, code: str
) -> None:
    ran = run_beside_helper(tmp_path, language, code, {}, None)
    assert (ran.code, ran.stdout, ran.stderr) == (0, "", "")
    assert [line["ask"] for line in ran.talk] == [RATE_KEY]


def test_arguments_that_change_between_rounds_make_a_new_key(
    tmp_path: Path, language: Language
) -> None:
    """The answer to GBP->JPY is not the answer to GBP->USD: the call is made again."""
    code = SCRIPTS[language].replace("'JPY'}", "'USD'}").replace('to="JPY"', 'to="USD"')
    ran = run_beside_helper(tmp_path, language, code, RATE_ANSWER, None)
    usd = {"from": "GBP", "to": "USD"}
    assert ran.talk == [
        {"ask": call_key(1, "fx_rate", usd), "call": {"name": "fx_rate", "arguments": usd}}
    ]


def test_a_tool_not_in_kiln_calls_is_refused_at_once_without_asking(
    tmp_path: Path, language: Language
) -> None:
    ran = run_beside_helper(tmp_path, language, SCRIPTS[language], RATE_ANSWER, ["fx_rate"])
    assert ran.talk == []
    why = (
        "this tool may not call 'fmt-money': it calls only the tools its manifest declares "
        'in "calls" (here: fx_rate)'
    )
    true = "True" if language == "python" else "true"
    assert ran.stdout == f"fmt-money failed: {why} {true} fmt-money\n", ran.stderr
    none = run_beside_helper(tmp_path, language, SCRIPTS[language], {}, [])
    assert none.talk == []
    assert "(here: none: its manifest declares no calls)" in none.stdout + none.stderr


def test_what_javascript_asks_of_an_object_is_no_call_in_node(tmp_path: Path) -> None:
    """`${tools}`, `await tools`, JSON and console.log do not call tools named `toString`,
    `then` or `toJSON` (those are called with tools.call)."""
    code = (
        "const { tools } = require('./kiln_tools');\n"
        "(async () => { await tools; console.log(`${tools}`, JSON.stringify(tools)); })();\n"
    )
    ran = run_beside_helper(tmp_path, "node", code, {}, ["fx_rate"])
    assert (ran.code, ran.stdout, ran.talk) == (0, "[object Object] {}\n", []), ran.stderr


def test_outside_a_kiln_run_a_call_says_why_it_cannot_ask(tmp_path: Path) -> None:
    code = "from kiln_tools import tools\ntools.fx_rate(from_='GBP')\n"
    write_run_files(tmp_path, {}, "python")
    (tmp_path / "main.py").write_text(code)
    done = subprocess.run(
        [sys.executable, "main.py"], cwd=tmp_path, env={}, capture_output=True, text=True,
        timeout=30, check=False,
    )  # fmt: skip
    assert done.returncode == 1
    assert "cannot call 'fx_rate': this is not a Kiln run (no KILN_TALK_FD)" in done.stderr


# Through the Runner: the helper is there in every run, without files, in both uid models.


@pytest.fixture(params=["uid-per-run", "shared-uid"])
def model(request: pytest.FixtureRequest, harness: Harness) -> Harness:
    if request.param == "shared-uid":
        return harness.with_settings(run_uids=None)
    return harness


def test_every_run_finds_kiln_tools_beside_its_script_without_files_of_its_own(
    model: Harness, language: Language
) -> None:
    result = model.run(SCRIPTS[language], language, answers=BOTH, calls=("fx_rate", "fmt-money"))
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout) == {"rate": 187.5, "text": {"text": "¥187.50"}}
    refused = model.run(SCRIPTS[language], language, answers=RATE_ANSWER, calls=("fx_rate",))
    assert "may not call 'fmt-money'" in refused.stdout, refused.stderr
    model.assert_clean()


def test_a_run_s_copy_of_kiln_tools_is_its_own(model: Harness) -> None:
    """A run that rewrites its kiln_tools changes no later run's."""
    tamper = (
        "import kiln_tools, pathlib\n"
        "path = pathlib.Path(kiln_tools.__file__)\n"
        "path.write_text('raise SystemExit(\"tampered\")')\n"
        "print(path.stat().st_uid == __import__('os').getuid(), oct(path.stat().st_mode & 0o22))\n"
    )
    first = model.run(tamper)
    assert first.stdout == "True 0o0\n", first.stderr  # the run's own file, no one else's to write
    after = model.run(SCRIPTS["python"], answers=BOTH, calls=("fx_rate", "fmt-money"))
    assert json.loads(after.stdout) == {"rate": 187.5, "text": {"text": "¥187.50"}}, after.stderr
    model.assert_clean()


def test_a_tool_saved_with_its_own_kiln_tools_file_keeps_it(harness: Harness) -> None:
    """Before the catalog reserved the name, a tool could ship one: its own wins."""
    own = {"kiln_tools.py": b"tools = 'the author\\'s own'\n"}
    result = harness.run("from kiln_tools import tools\nprint(tools)", files=own)
    assert result.stdout == "the author's own\n", result.stderr
    harness.assert_clean()


GATHER = {
    "python": "from kiln_tools import tools\nimport json\n"
    'a, b = tools.gather(("fx_rate", {"from": "GBP"}), ("fx_rate", {"from": "EUR"}))\n'
    "print(json.dumps([a, b]))\n",
    "node": "const { tools } = require('./kiln_tools');\n"
    "const [a, b] = tools.gather([['fx_rate', {from: 'GBP'}], ['fx_rate', {from: 'EUR'}]]);\n"
    "console.log(JSON.stringify([a, b]));\n",
}


def test_gather_asks_every_unanswered_call_in_one_round_and_returns_them_in_order(
    tmp_path: Path, language: str
) -> None:
    keys = [call_key(1, "fx_rate", {"from": "GBP"}), call_key(2, "fx_rate", {"from": "EUR"})]
    first = run_beside_helper(tmp_path, language, GATHER[language], {}, ["fx_rate"])
    assert (first.code, first.stdout) == (0, ""), first.stderr
    assert [line["ask"] for line in first.talk] == keys  # both at once: one round, not two
    half = run_beside_helper(
        tmp_path, language, GATHER[language], {keys[0]: text_result("1.25")}, ["fx_rate"]
    )
    assert [line["ask"] for line in half.talk] == keys[1:], half.stderr  # only the missing one
    answers = {keys[0]: text_result("1.25"), keys[1]: text_result("1.1")}
    done = run_beside_helper(tmp_path, language, GATHER[language], answers, ["fx_rate"])
    assert done.talk == [], done.stderr
    assert json.loads(done.stdout) == [1.25, 1.1]
