"""A breaking change in the studio: before saving, the author sees what it breaks and the diff
of the tool's contract, and saves it only by ticking the box under the diff."""

from __future__ import annotations

from typing import Any

from playwright.sync_api import expect

from support.browser import Dev, assert_accessible, shoot, sign_in

CODE = "import json, sys\nargs = json.load(sys.stdin)\nprint(args.get('city', 'here'))\n"


def test_a_breaking_draft_shows_its_findings_and_diff_and_saves_only_when_ticked(
    page: Any, dev: Dev
) -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string"}}}
    body = {"name": "forecast", "description": "The weather.", "language": "python",
            "code": CODE, "input_schema": schema}  # fmt: skip
    made = dev.api("POST", "/api/tools", json=body)
    assert made.status_code == 201, made.text
    sign_in(page)
    page.goto("/studio/#/tools/forecast/schema")
    builder = page.locator("[data-schema='input-schema']")
    builder.get_by_label("Required").nth(0).check()

    panel = page.get_by_test_id("breaking")
    expect(panel).to_contain_text("This change breaks the tool's clients")
    expect(page.get_by_test_id("breaking-findings")).to_contain_text(
        "input_schema/properties/city: now required"
    )
    expect(panel.get_by_test_id("diff")).to_contain_text('"required"')
    save = page.get_by_role("button", name="Save")
    expect(save).to_be_disabled()
    shoot(page, "30-breaking-change")
    assert_accessible(page)
    assert dev.api("GET", "/api/tools/forecast").json()["revision"] == 1

    panel.get_by_label("Save it as a breaking change").check()
    expect(save).to_be_enabled()
    save.click()
    expect(page.get_by_text("Saved as revision 2.")).to_be_visible()
    expect(panel).to_be_hidden()
    saved = dev.api("GET", "/api/tools/forecast/revisions/2").json()
    assert saved["breaking"] is True, saved
    assert saved["findings"][0]["kind"] == "required-input", saved
