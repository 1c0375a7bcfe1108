"""The talk channel (kiln/runner/talk.py): progress, logs and asks beside stdout, both languages."""

from __future__ import annotations

import json

import pytest

from kiln.runner.talk import Ask, Log, Progress, Said, parse_line
from support.runner import Harness
from support.runner import harness_fixture as harness_fixture

PY = r"""
import json, os, sys
args = json.load(sys.stdin)
talk = os.fdopen(int(os.environ["KILN_TALK_FD"]), "w", buffering=1)
def say(**line): talk.write(json.dumps(line) + "\n")
answers = json.loads(os.environ["KILN_ANSWERS"])
say(progress=1, total=2, message="looking")
say(log="info", data={"step": 1})
if "name" not in answers:
    say(ask="name", elicitation={"message": "Name?", "requestedSchema": {"type": "object"}})
    sys.exit(0)
print("hello", answers["name"]["content"]["name"], args["greeting"], os.environ["KILN_CAN_ASK"])
"""
NODE = r"""
const fs = require('node:fs');
const args = JSON.parse(fs.readFileSync(0, 'utf8'));
const say = (line) => fs.writeSync(Number(process.env.KILN_TALK_FD), JSON.stringify(line) + '\n');
const answers = JSON.parse(process.env.KILN_ANSWERS);
say({progress: 1, total: 2, message: 'looking'});
say({log: 'info', data: {step: 1}});
if (!answers.name) {
  say({ask: 'name', elicitation: {message: 'Name?', requestedSchema: {type: 'object'}}});
  process.exit(0);
}
console.log('hello', answers.name.content.name, args.greeting, process.env.KILN_CAN_ASK);
"""


@pytest.mark.parametrize(("language", "code"), [("python", PY), ("node", NODE)])
def test_a_script_reports_progress_and_logs_as_it_runs_and_asks_then_reads_the_answer(
    harness: Harness, language: str, code: str
) -> None:
    heard: list[Said] = []
    first = harness.run(code, language, arguments={"greeting": "hi"}, heard=heard.append)  # type: ignore[arg-type]
    assert first.exit_code == 0, first.stderr
    assert first.asks == (
        Ask("name", "elicitation", {"message": "Name?", "requestedSchema": {"type": "object"}}),
    )
    assert heard == [Progress(1, 2, "looking"), Log("info", {"step": 1})]
    answer = {"name": {"action": "accept", "content": {"name": "Ada"}}}
    second = harness.run(
        code,
        language,
        arguments={"greeting": "hi"},
        answers=answer,
        can_ask=("elicitation",),  # type: ignore[arg-type]
    )
    assert second.asks == ()
    assert second.stdout.strip() == "hello Ada hi elicitation", second.stderr
    harness.assert_clean()


def test_lines_that_break_the_contract_are_reported_by_line_and_rule(harness: Harness) -> None:
    code = (
        "import os\nfd = int(os.environ['KILN_TALK_FD'])\n"
        'os.write(fd, b\'not json\\n{"progress": "half"}\\n{"ask": "k", "elicitation": 3}\\n\')\n'
        'os.write(fd, b\'{"log": "loud"}\\n{"progress": 1}\')\n'
    )
    heard: list[Said] = []
    result = harness.run(code, heard=heard.append)
    assert result.talk_problems == (
        "line 1 is not a JSON object",
        'line 2 "progress" (and "total", when given) must be finite numbers',
        'line 3 "elicitation" must be an object (the request\'s params)',
        'line 4 "log" must be one of debug, info, notice, warning, error, critical, alert, '
        "emergency",
    )
    assert heard == [Progress(1)]  # the last line counts without its newline
    assert result.asks == ()


def test_a_script_that_never_talks_gets_an_empty_conversation(harness: Harness) -> None:
    result = harness.run("import os\nprint(os.environ['KILN_ANSWERS'], os.environ['KILN_CAN_ASK'])")
    assert result.stdout == "{} \n"
    assert (result.asks, result.talk_problems) == ((), ())


def test_a_line_past_the_cap_is_dropped_and_reported(harness: Harness) -> None:
    code = (
        "import os\nfd = int(os.environ['KILN_TALK_FD'])\n"
        'os.write(fd, b\'{"log": "info", "data": "\' + b\'x\' * 1100000 + b\'"}\\n\')\n'
        "os.write(fd, b'{\"progress\": 3}\\n')\n"
    )
    heard: list[Said] = []
    result = harness.run(code, heard=heard.append)
    assert result.talk_problems == ("line 1 is longer than 1048576 bytes",)
    assert heard == [Progress(3)]


@pytest.mark.parametrize(
    ("line", "rule"),
    [
        ({"ask": "", "roots": {}}, '"ask" must be a key of 1 to 64 characters'),
        ({"ask": "a", "roots": {}, "sampling": {}}, "exactly one of"),
        ({"progress": 1, "log": "info"}, "more than one"),
        ({"progress": float("nan")}, "finite numbers"),
        ([1], "is not a JSON object"),
        ({"ask": "r", "call": {"arguments": {}}}, 'a "call" names its tool'),
        ({"ask": "r", "call": {"name": 7}}, 'a "call" names its tool'),
        ({"ask": "r", "call": {"name": "fx", "arguments": [1]}}, '"arguments" must be an object'),
        ({"ask": "r", "call": {"name": "fx", "args": {}}}, 'holds only "name" and "arguments"'),
        ({"ask": "r", "call": "fx_rate"}, '"call" must be an object'),
    ],
)
def test_parse_line_names_the_rule_a_line_breaks(line: object, rule: str) -> None:
    # (a call line's arguments default to {}: parse_line({"ask": "r", "call": {"name": "fx"}}))
    with pytest.raises(ValueError, match=rule.replace("(", r"\(").replace(")", r"\)")):
        parse_line(json.dumps(line).encode())
