"""The test console shows what a script said while it ran and lets the author answer its
questions (a form from the requested schema, the model's answer), in real Chromium."""

from __future__ import annotations

import re
from typing import Any

from playwright.sync_api import expect

from support.browser import Dev, assert_accessible, shoot, sign_in

ASKER = """import json, os, sys

talk = os.fdopen(int(os.environ["KILN_TALK_FD"]), "w", buffering=1)
answers = json.loads(os.environ["KILN_ANSWERS"])
say = lambda **line: talk.write(json.dumps(line) + "\\n")
json.load(sys.stdin)
say(progress=1, total=2, message="half way")
say(log="warning", data="disk almost full")
form = {"type": "object", "properties": {"city": {"type": "string", "title": "City"}}}
if "where" not in answers:
    say(ask="where", elicitation={"message": "Which city?", "requestedSchema": form})
question = {"role": "user", "content": {"type": "text", "text": "Weather?"}}
if "model" not in answers:
    say(ask="model", sampling={"messages": [question], "maxTokens": 20})
if "where" not in answers or "model" not in answers:
    sys.exit(0)
print(f"{answers['where']['content']['city']}: {answers['model']['content']['text']}")
"""


def test_the_console_shows_talk_and_answers_questions_until_the_tool_answers(
    page: Any, dev: Dev
) -> None:
    body = {"name": "asker", "description": "Asks two questions.", "language": "python"}
    body |= {"code": ASKER, "input_schema": {"type": "object"}}
    assert dev.api("POST", "/api/tools", json=body).status_code == 201
    sign_in(page)
    page.goto("/studio/#/tools/asker/test")
    page.get_by_role("button", name="Run", exact=True).click()
    expect(page.get_by_test_id("progress")).to_have_text("1 of 2: half way")
    expect(page.get_by_test_id("logs")).to_contain_text("disk almost full")
    questions = page.get_by_test_id("questions")
    expect(questions).to_contain_text("Which city?")
    expect(questions).to_contain_text("Weather?")
    shoot(page, "20-console-questions")
    assert_accessible(page)
    questions.get_by_label("City").fill("Lisbon")
    questions.get_by_label("The model's answer").fill("sunny")
    questions.get_by_role("button", name="Answer and run again").click()
    expect(page.get_by_test_id("stdout")).to_contain_text("Lisbon: sunny")


# Reports its first step, then waits until the test, having seen that step on screen, sends it
# a datagram on the port it logged: it can finish only if the page showed its talk while it
# ran (else it gives up and says so).
STEPPER = """import json, os, socket, sys

talk = os.fdopen(int(os.environ["KILN_TALK_FD"]), "w", buffering=1)
say = lambda **line: talk.write(json.dumps(line) + "\\n")
json.load(sys.stdin)
gate = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
gate.bind(("127.0.0.1", 0))
gate.settimeout(20)
say(progress=1, total=2, message="first step")
say(log="info", data=f"waiting on udp port {gate.getsockname()[1]}")
try:
    gate.recv(16)
except socket.timeout:
    sys.exit("nobody saw the first step while the run went on")
say(progress=2, total=2, message="second step")
print("both steps done")
"""


def test_the_console_shows_progress_and_logs_while_the_run_goes_on(page: Any, dev: Dev) -> None:
    import re
    import socket

    body = {"name": "stepper", "description": "Two steps, a pause between.", "language": "python"}
    body |= {"code": STEPPER, "input_schema": {"type": "object"}, "timeout_seconds": 30}
    made = dev.api("POST", "/api/tools", json=body)
    assert made.status_code == 201, made.text
    sign_in(page)
    page.goto("/studio/#/tools/stepper/test")
    page.get_by_role("button", name="Run", exact=True).click()
    # Only the running script's first step reads so: the finished run shows "2 of 2".
    expect(page.get_by_test_id("progress")).to_have_text("1 of 2: first step")
    expect(page.get_by_test_id("running")).to_be_visible()
    expect(page.get_by_test_id("stdout")).to_have_count(0)
    logs = page.get_by_test_id("logs")
    expect(logs).to_contain_text("waiting on udp port")
    shoot(page, "21-console-live")
    assert_accessible(page)
    port = re.search(r"waiting on udp port (\d+)", logs.inner_text())
    assert port is not None, logs.inner_text()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as release:
        release.sendto(b"go", ("127.0.0.1", int(port.group(1))))
    expect(page.get_by_test_id("stdout")).to_contain_text("both steps done", timeout=30_000)
    expect(page.get_by_test_id("progress")).to_have_text("2 of 2: second step")
    expect(page.get_by_test_id("running")).to_have_count(0)


CALLER = """import json, sys
from kiln_tools import ToolCallError, tools

net = json.load(sys.stdin)["net"]
try:
    gross = tools.add_vat(net=net)["gross"]
except ToolCallError as error:
    print(f"add_vat failed: {error}")
else:
    print(f"{net} is {gross} with VAT")
"""


def test_the_console_makes_a_scripts_calls_or_takes_a_result_typed_by_hand(
    page: Any, dev: Dev
) -> None:
    vat = (
        'import json, sys\nnet = json.load(sys.stdin)["net"]\n'
        'print(json.dumps({"gross": f"{net * 1.2:.2f}"}))\n'
    )
    made = dev.api("POST", "/api/tools", json={
        "name": "add_vat", "description": "Adds VAT.", "language": "python", "code": vat,
        "input_schema": {"type": "object"},
        "annotations": {"readOnlyHint": True, "destructiveHint": False},
    })  # fmt: skip
    assert made.status_code == 201, made.text
    body = {"name": "priced", "description": "Calls add_vat.", "language": "python"}
    schema = {"type": "object", "properties": {"net": {"type": "number", "title": "Net"}}}
    body |= {"code": CALLER, "input_schema": schema, "calls": ["add_vat"]}
    assert dev.api("POST", "/api/tools", json=body).status_code == 201, body
    sign_in(page)
    page.goto("/studio/#/tools/priced/test")
    page.get_by_label("Net").fill("10")
    page.get_by_role("button", name="Run", exact=True).click()
    questions = page.get_by_test_id("questions")
    expect(questions).to_contain_text('The script calls add_vat with {"net":10}')
    shoot(page, "29-console-calls")
    assert_accessible(page)
    questions.get_by_role("button", name="Make the call").click()  # for real, through /mcp
    expect(questions.get_by_role("textbox")).to_have_value(re.compile(r'gross\\": \\"12\.00'))
    questions.get_by_role("button", name="Answer and run again").click()
    expect(page.get_by_test_id("stdout")).to_contain_text("10 is 12.00 with VAT")
    # Again, answering by hand with a failure: the script's own handling shows.
    page.get_by_role("button", name="Run", exact=True).click()
    refused = '{"content": [{"type": "text", "text": "rates down"}], "isError": true}'
    page.get_by_test_id("questions").get_by_role("textbox").fill(refused)
    page.get_by_test_id("questions").get_by_role("button", name="Answer and run again").click()
    expect(page.get_by_test_id("stdout")).to_contain_text("add_vat failed: rates down")
