"""A tool's life in the studio: found by search, renamed, switched off and on, deleted with its
history still readable; syntax and rule problems shown before any save."""

from __future__ import annotations

import re
from typing import Any

from playwright.sync_api import expect

from support.browser import Dev, assert_accessible, set_code, shoot, sign_in


def make(dev: Dev, name: str, language: str = "python", code: str = "print(1)\n") -> None:
    body = {"name": name, "description": f"The {name} tool.", "language": language, "code": code}
    assert dev.api("POST", "/api/tools", json=body).status_code == 201


def test_author_finds_renames_disables_and_deletes_a_tool_and_reads_its_history(
    page: Any, dev: Dev
) -> None:
    make(dev, "alpha_report")
    make(dev, "beta_report", "node", "console.log(1)\n")
    sign_in(page)
    page.get_by_label("Search").fill("beta")
    rows = page.get_by_role("row")
    expect(rows.filter(has_text="beta_report")).to_have_count(1)
    expect(rows.filter(has_text="alpha_report")).to_have_count(0)
    page.get_by_label("Search").fill("")
    page.get_by_label("Language").select_option("node")
    expect(rows.filter(has_text="alpha_report")).to_have_count(0)
    page.get_by_label("Language").select_option("all")
    shoot(page, "01-tools")
    assert_accessible(page)

    page.get_by_role("link", name="alpha_report").click()
    page.get_by_role("link", name="Settings").click()
    page.get_by_role("button", name="Disable").click()
    expect(page.get_by_text("disabled", exact=True)).to_be_visible()
    page.get_by_role("button", name="Enable").click()
    expect(page.get_by_text("enabled", exact=True)).to_be_visible()
    page.get_by_label("New name").fill("gamma_report")
    page.get_by_role("button", name="Rename").click()
    expect(page.get_by_role("heading", name="gamma_report")).to_be_visible()
    assert dev.api("GET", "/api/tools/gamma_report").status_code == 200

    delete = page.get_by_role("button", name="Delete tool")
    expect(delete).to_be_disabled()
    page.get_by_label(re.compile("to confirm")).fill("gamma_report")
    delete.click()
    expect(page.get_by_role("heading", name="Tools")).to_be_visible()
    expect(page.get_by_role("link", name="gamma_report")).to_have_count(0)
    page.get_by_role("link", name="Deleted tools").click()
    page.get_by_role("row", name=re.compile("gamma_report")).get_by_role("button").click()
    expect(page.get_by_text("The alpha_report tool.")).to_be_visible()
    shoot(page, "14-deleted-tools")
    assert_accessible(page)


def test_syntax_errors_and_broken_rules_show_before_saving_and_json_edits_reach_the_form(
    page: Any, dev: Dev
) -> None:
    make(dev, "draft_checks")
    sign_in(page)
    page.goto("/studio/#/tools/draft_checks/code")
    set_code(page, "import json\n\ndef broken(:\n    pass\n")
    problem = page.get_by_test_id("syntax-error")
    expect(problem).to_contain_text("line 3")
    expect(page.locator(".cm-lintRange-error, .cm-lint-marker-error").first).to_be_visible()
    page.get_by_label(re.compile("^Timeout")).fill("5000")
    # At the field, in plain words; the rule's name only behind Details.
    at_field = page.locator("#e-timeout_seconds")
    expect(at_field).to_contain_text("Must be more than 0 and at most 900 seconds.")
    expect(page.get_by_label(re.compile("^Timeout"))).to_have_attribute("aria-invalid", "true")
    assert "(rule:" not in at_field.inner_text()
    at_field.get_by_text("Details").click()
    expect(at_field).to_contain_text("rule: range")
    shoot(page, "15-problems")
    page.get_by_label(re.compile("^Timeout")).fill("10")
    set_code(page, "import json\nprint(json.dumps({}))\n")
    expect(problem).to_have_count(0)

    page.get_by_role("link", name="Schemas").click()
    json_view = page.get_by_role("textbox", name="Input schema as JSON")
    json_view.click()
    page.keyboard.press("Control+A")
    page.keyboard.press("Delete")
    schema = (
        '{"type": "object", "properties": {"city": {"type": "string", "enum": ["Oslo", "Lima"]}}}'
    )
    page.keyboard.insert_text(schema)
    builder = page.locator("[data-schema='input-schema']")
    expect(builder.get_by_label("Name", exact=True)).to_have_value("city")
    expect(builder.get_by_label("Allowed values")).to_have_value("Oslo\nLima")
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_text("Saved as revision 2.")).to_be_visible()
    saved = dev.api("GET", "/api/tools/draft_checks").json()
    assert saved["input_schema"]["properties"]["city"]["enum"] == ["Oslo", "Lima"]
    assert saved["timeout_seconds"] == 10
