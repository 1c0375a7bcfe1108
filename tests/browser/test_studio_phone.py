"""At a phone's width (390x844) no screen scrolls sideways: the page is exactly as wide as the
screen (long code lines and wide tables scroll inside their own box), and the tool's tab row,
wider than the screen, shows that it scrolls."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import expect

from support.browser import NARROW, Dev, open_page, sign_in

LONG = "x = " + " + ".join(f"value_{i}" for i in range(60))  # one line far wider than a phone
CODE = f"import json, sys\n{LONG}\nprint(json.dumps({{'a_long_key': 'and a long value'}}))\n"
TOOL = "phone_width_tool_with_a_long_name"
SCREENS = [
    "#/tools", "#/new", "#/keys", "#/connect", "#/connections", "#/deleted", "#/views",
    "#/views/phone_view", "#/calls", "#/nowhere",
    *(f"#/tools/{TOOL}/{tab}" for tab in
      ("code", "schema", "test", "history", "package", "secrets", "settings", "usage")),
]  # fmt: skip


# The outermost elements that reach past the right edge of the screen, for the failure message.
STICKING_OUT = """() => {
    const clipped = (el) => {
        for (let up = el.parentElement; up; up = up.parentElement)
            if (getComputedStyle(up).overflowX !== "visible") return true;
        return false;
    };
    return [...document.querySelectorAll('body *')]
        .filter((el) => el.getBoundingClientRect().right > innerWidth + 1 && !clipped(el))
        .slice(0, 5)
        .map((el) => `${el.outerHTML.slice(0, 100)} (right ${el.getBoundingClientRect().right})`);
}"""


@pytest.fixture(scope="module")
def prepared(dev: Dev) -> Dev:
    body = {"name": TOOL, "description": "A tool with a long line.", "language": "python"}
    body |= {"code": CODE, "tags": ["phone"], "requirements": []}
    body |= {
        "input_schema": {
            "type": "object",
            "properties": {
                "a_long_property_name": {
                    "type": "string",
                    "description": "A description long enough to wrap on a phone",
                }
            },
        }
    }
    made = dev.api("POST", "/api/tools", json=body)
    assert made.status_code == 201, made.text
    second = {**body, "description": "Second revision, for History's diff."}
    again = dev.api("PUT", f"/api/tools/{TOOL}", headers={"If-Match": '"1"'}, json=second)
    assert again.status_code == 200, again.text
    view = {"name": "phone_view", "tools": [f"{TOOL}@1", "tag:phone"], "published": True}
    made = dev.api("POST", "/api/views", json=view)
    assert made.status_code == 201, made.text
    return dev


@pytest.fixture
def phone(browser: Any, prepared: Dev) -> Iterator[Any]:
    context, page, watch = open_page(browser, prepared, NARROW)
    sign_in(page)
    yield page
    context.close()
    assert watch.errors == [], f"console errors: {watch.errors}"


@pytest.mark.parametrize("screen", SCREENS)
def test_no_screen_scrolls_sideways_at_phone_width(phone: Any, screen: str) -> None:
    phone.goto(f"/studio/{screen}")
    phone.locator("main h1, main h2").first.wait_for()
    if screen.endswith("/code"):
        phone.locator(".cm-content").wait_for()
    if screen.endswith("/history"):
        phone.locator("main table, main .cm-editor, main pre").first.wait_for()
    phone.wait_for_timeout(300)
    wide = phone.evaluate("document.documentElement.scrollWidth")
    assert wide == NARROW["width"], (
        f"{screen}: the page is {wide} px wide on a 390 px screen; "
        f"sticking out: {phone.evaluate(STICKING_OUT)}"
    )


def test_a_deleted_tool_with_its_history_open_fits_a_phone(phone: Any, prepared: Dev) -> None:
    name = "phone_deleted_tool_with_a_long_name"
    body = {"name": name, "description": "Deleted, with a history to read on a phone.",
            "language": "python", "code": "print(1)\n"}  # fmt: skip
    made = prepared.api("POST", "/api/tools", json=body)
    assert made.status_code == 201, made.text
    gone = prepared.api("DELETE", f"/api/tools/{name}")
    assert gone.status_code in (200, 204), gone.text
    phone.goto("/studio/#/deleted")
    phone.get_by_role("row", name=re.compile(name)).get_by_role("button", name="History").click()
    phone.locator("ol.revs li").first.wait_for()
    wide = phone.evaluate("document.documentElement.scrollWidth")
    assert wide == NARROW["width"], (
        f"#/deleted with a history open: the page is {wide} px wide on a 390 px screen; "
        f"sticking out: {phone.evaluate(STICKING_OUT)}"
    )


def test_the_tab_row_shows_that_it_scrolls(phone: Any) -> None:
    phone.goto(f"/studio/#/tools/{TOOL}/code")
    tabs = phone.get_by_role("navigation", name="Tool sections")
    expect(tabs).to_be_visible()
    sizes = tabs.evaluate(
        "(el) => [el.scrollWidth, el.clientWidth, getComputedStyle(el).backgroundImage]"
    )
    assert sizes[0] > sizes[1], f"the tab row fits ({sizes[0]} <= {sizes[1]}): nothing to show"
    assert sizes[2].count("gradient") == 4, f"no scroll shadows on the tab row: {sizes[2]}"
    phone.goto(f"/studio/#/tools/{TOOL}/usage")  # the active tab is scrolled into sight
    active = tabs.locator("a.active")
    expect(active).to_be_in_viewport()
