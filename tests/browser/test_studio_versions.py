"""Saving against someone else's save, history diffs and restore, and a bundle build, watched
in the studio."""

from __future__ import annotations

import re
from typing import Any

from playwright.sync_api import expect

from support.browser import DESKTOP, NARROW, Dev, assert_accessible, both_widths, shoot, sign_in

CODE_V1 = "import json, sys\nargs = json.load(sys.stdin)\nprint(json.dumps({'v': 1}))\n"
CODE_THEIRS = "import json, sys\nargs = json.load(sys.stdin)\nprint(json.dumps({'v': 'theirs'}))\n"


def make_tool(dev: Dev, name: str, **fields: Any) -> dict[str, Any]:
    body = {"name": name, "description": "v1", "language": "python", "code": CODE_V1, **fields}
    reply = dev.api("POST", "/api/tools", json=body)
    assert reply.status_code == 201, reply.text
    return dict(reply.json())


def test_a_concurrent_save_shows_the_conflict_and_the_author_reapplies_on_top(
    page: Any, dev: Dev
) -> None:
    make_tool(dev, "contested")
    sign_in(page)
    page.goto("/studio/#/tools/contested/code")
    page.get_by_label("Description").fill("mine: a better description")
    theirs = dev.api(
        "PUT",
        "/api/tools/contested",
        headers={"If-Match": '"1"'},
        json={"name": "contested", "description": "v1", "language": "python", "code": CODE_THEIRS},
    )
    assert theirs.status_code == 200, theirs.text
    page.get_by_role("button", name="Save").click()

    conflict = page.get_by_test_id("conflict")
    # Their save used the same key as this studio: the banner says so, not "another author".
    expect(conflict).to_contain_text("This tool changed since you opened it")
    expect(page.get_by_test_id("conflict-author")).to_have_text("revision 2 by you (this key)")
    expect(conflict).to_contain_text("'theirs'")  # their code, beside the start and mine
    expect(conflict).to_contain_text("mine: a better description")
    shoot(page, "06-conflict")
    assert_accessible(page)
    assert dev.api("GET", "/api/tools/contested").json()["revision"] == 2  # nothing overwritten

    conflict.get_by_role("button", name="Reapply my changes on top of theirs").click()
    expect(conflict).to_be_hidden()
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_text("Saved as revision 3.")).to_be_visible()
    head = dev.api("GET", "/api/tools/contested").json()
    assert head["description"] == "mine: a better description"
    assert "'theirs'" in head["code"]


def test_author_diffs_two_revisions_and_restores_one(page: Any, dev: Dev) -> None:
    make_tool(dev, "versioned")
    for n, code in ((1, CODE_THEIRS), (2, CODE_V1.replace("1}", "3}"))):
        body = {"name": "versioned", "description": f"v{n + 1}", "language": "python", "code": code}
        reply = dev.api("PUT", "/api/tools/versioned", headers={"If-Match": f'"{n}"'}, json=body)
        assert reply.status_code == 200, reply.text
    sign_in(page)
    page.goto("/studio/#/tools/versioned/history")
    # Each revision's fingerprint (short; the whole one in its title), the head's at the top.
    revisions = dev.api("GET", "/api/tools/versioned/revisions").json()["revisions"]
    prints = [r["fingerprint"] for r in sorted(revisions, key=lambda r: -r["revision"])]
    expect(page.get_by_test_id("revision-fingerprint")).to_have_text([f[:19] + "…" for f in prints])
    expect(page.get_by_test_id("fingerprint")).to_have_attribute("title", re.compile(prints[0]))
    page.get_by_label("Compare from revision 1").check()
    page.get_by_label("Compare to revision 2").check()
    expect(page.get_by_role("heading", name="r1 → r2")).to_be_visible()
    diff = page.get_by_test_id("diff")
    expect(diff).to_contain_text("'theirs'")
    expect(diff).to_contain_text("'v': 1")
    page.get_by_role("button", name="Manifest").click()
    expect(page.get_by_test_id("diff")).to_contain_text('"v2"')
    shoot(page, "07-history")
    assert_accessible(page)

    page.get_by_role("button", name="Restore r1").click()
    expect(page.get_by_text("Revision 1 restored as revision 4.")).to_be_visible()
    head = dev.api("GET", "/api/tools/versioned").json()
    assert head["revision"] == 4
    assert head["code"] == CODE_V1


# The controls that sit outside the screen, or outside a box that clips them (a table scrolling
# sideways in its card): what a person would have to scroll sideways to reach, or never sees.
OUT_OF_SIGHT = """(controls) => controls.filter((el) => {
    const box = el.getBoundingClientRect();
    if (box.left < 0 || box.right > innerWidth) return true;
    for (let up = el.parentElement; up; up = up.parentElement) {
        if (getComputedStyle(up).overflowX === "visible") continue;
        const clip = up.getBoundingClientRect();
        if (box.left < clip.left || box.right > clip.right) return true;
    }
    return false;
}).map((el) => `${el.textContent} (left ${Math.round(el.getBoundingClientRect().left)}, `
    + `right ${Math.round(el.getBoundingClientRect().right)} on a ${innerWidth} px screen)`)"""


def test_every_restore_button_is_in_sight_at_desktop_and_phone_width(page: Any, dev: Dev) -> None:
    name = "restorable_with_a_name_long_enough_for_a_phone"
    long = "A description long enough to need more than one line on a phone's narrow screen"
    make_tool(dev, name, description=long)
    for n in (1, 2):
        body = {"name": name, "description": f"{long}, v{n + 1}", "language": "python",
                "code": CODE_V1.replace("1}", f"{n + 1}}}")}  # fmt: skip
        reply = dev.api("PUT", f"/api/tools/{name}", headers={"If-Match": f'"{n}"'}, json=body)
        assert reply.status_code == 200, reply.text
    sign_in(page)
    page.goto(f"/studio/#/tools/{name}/history")
    restores = page.get_by_role("button", name=re.compile(r"^Restore r\d+$"))
    expect(restores).to_have_count(2)
    both_widths(page, "23-history")
    for size in (DESKTOP, NARROW):
        page.set_viewport_size(size)
        expect(restores.first).to_be_visible()
        hidden = restores.evaluate_all(OUT_OF_SIGHT)
        assert hidden == [], f"Restore out of sight at {size['width']} px: {hidden}"

    page.set_viewport_size(NARROW)  # and it works there
    page.get_by_role("button", name="Restore r1").click()
    expect(page.get_by_text("Revision 1 restored as revision 4.")).to_be_visible()
    assert dev.api("GET", f"/api/tools/{name}").json()["code"] == CODE_V1


def test_author_watches_a_bundle_go_from_building_to_ready(page: Any, dev: Dev) -> None:
    make_tool(dev, "packaged")
    sign_in(page)
    page.goto("/studio/#/tools/packaged/code")
    page.get_by_label(re.compile("^Requirements")).fill("humanize==4.*")
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_text("Saved as revision 2.")).to_be_visible()
    page.get_by_role("link", name="Packages").click()
    badge = page.get_by_role("region", name="Dependency bundle").locator("[data-bundle-status]")
    expect(badge).to_have_attribute("data-bundle-status", re.compile("pending|building"))
    shoot(page, "08-package-building")
    expect(badge).to_have_attribute("data-bundle-status", "ready", timeout=90_000)
    lock = page.get_by_role("region", name="Dependency bundle")
    expect(lock).to_contain_text("humanize")
    expect(lock.get_by_label("Build log")).not_to_have_text("(no log yet)")
    shoot(page, "09-package-ready")
    assert_accessible(page)
