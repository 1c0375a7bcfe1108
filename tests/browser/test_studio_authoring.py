"""An author writes, runs, saves and versions a tool in the studio, in real Chromium."""

from __future__ import annotations

import json
import re
from typing import Any

from playwright.sync_api import expect

from support.browser import Dev, assert_accessible, set_code, shoot, sign_in

TWO_FIELDS = """import json
import sys

args = json.load(sys.stdin)
print("warming up", file=sys.stderr)
print(json.dumps({"greeting": f"hello {args['who']}", "times": args.get("times", 1)}))
"""


def test_author_creates_a_tool_with_a_two_field_schema_and_runs_it(page: Any, dev: Dev) -> None:
    sign_in(page)
    shoot(page, "01-tools-empty")
    page.get_by_role("link", name="New tool").click()
    basics = page.get_by_role("region", name="Basics")
    basics.get_by_label("Name").fill("greeter")
    basics.get_by_label("Description").fill("Greets someone, some number of times.")
    builder = page.locator("[data-schema='input-schema']")
    builder.get_by_role("button", name="+ Add property").click()
    builder.get_by_role("button", name="+ Add property").click()
    names = builder.get_by_label("Name", exact=True)
    names.nth(0).fill("who")
    builder.get_by_label("Required").nth(0).check()
    names.nth(1).fill("times")
    builder.get_by_label("Type").nth(1).select_option("integer")
    json_view = builder.get_by_role("textbox", name="Input schema as JSON")
    expect(json_view).to_contain_text('"required": [')
    expect(json_view).to_contain_text('"type": "integer"')
    shoot(page, "02-new-tool")
    assert_accessible(page)
    page.get_by_role("button", name="Create tool").click()

    expect(page.get_by_role("heading", name="greeter")).to_be_visible()
    set_code(page, TWO_FIELDS)
    expect(page.get_by_text("valid", exact=True)).to_be_visible()
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_text("Saved as revision 2.")).to_be_visible()
    shoot(page, "03-editor")
    assert_accessible(page)

    page.get_by_role("link", name="Schemas").click()
    expect(page.locator("[data-schema='input-schema']")).to_be_visible()
    shoot(page, "04-schemas")
    assert_accessible(page)

    page.get_by_role("link", name="Test").click()
    page.get_by_label(re.compile(r"^who")).fill("Ada")
    page.get_by_label(re.compile(r"^times")).fill("3")
    page.get_by_role("button", name="Run", exact=True).click()
    expect(page.get_by_test_id("exit-code")).to_have_text("0")
    stdout = page.get_by_test_id("stdout")
    assert json.loads(stdout.inner_text()) == {"greeting": "hello Ada", "times": 3}
    expect(page.get_by_test_id("stderr")).to_have_text("warming up")
    expect(page.get_by_test_id("mcp-result")).to_contain_text("hello Ada")
    page.get_by_label(re.compile(r"^times")).fill("4")
    page.get_by_role("button", name="Run", exact=True).click()
    expect(page.get_by_test_id("stdout")).to_contain_text('"times": 4')
    page.get_by_label("Compare run 1").check()
    page.get_by_label("Compare run 2").check()
    expect(page.get_by_role("heading", name="Run 1 · r2")).to_be_visible()
    expect(page.get_by_role("heading", name="Run 2 · r2")).to_be_visible()
    shoot(page, "05-test-console")
    assert_accessible(page)
