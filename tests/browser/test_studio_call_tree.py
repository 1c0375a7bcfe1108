"""The calls screen draws the calls a tool made (a script's, a code-mode run's) under it: nested,
collapsible, each with its tool, outcome, duration and detail; one whose outer call is not
loaded is marked, and its outer call's id finds its siblings."""

from __future__ import annotations

import time
from typing import Any

from playwright.sync_api import expect

from kiln.accounting.ledger import CallRecord, new_id
from support.browser import Dev, both_widths, sign_in


def seed_tree(dev: Dev) -> dict[str, str]:
    """`tree_job` with two inner calls (the second refused by a quota), and, newer, an inner
    call whose outer call is not in the ledger: all newer than anything else seeded."""
    ledger = dev.ledger()
    ids = {name: new_id() for name in ("job", "fx", "convert", "format", "lost")}
    at = time.time() - 5
    plan = [("job", "tree_job", 0.0, None, "ok", 950.0, None),
            ("fx", "tree_fx_rate", 0.1, "job", "ok", 120.0, None),
            ("convert", "tree_convert", 0.3, "job", "refused", 0.0,
             "quota: calls per minute (60) used up"),
            ("format", "tree_format", 2.0, "lost", "tool_error", 40.0, None)]  # fmt: skip
    for name, tool, offset, parent, outcome, duration, detail in plan:
        entry = CallRecord(at="", caller="key:seeder", tool=tool, outcome=outcome,  # type: ignore[arg-type]
                           revision=1, duration_ms=duration, detail=detail, id=ids[name],
                           parent=ids[parent] if parent else None)  # fmt: skip
        ledger.record(entry, started=at + offset)
    return ids


def test_inner_calls_are_nested_under_their_outer_call_collapsible_and_orphans_marked(
    page: Any, dev: Dev
) -> None:
    ids = seed_tree(dev)
    sign_in(page)
    page.get_by_role("link", name="Calls", exact=True).click()
    table = page.get_by_test_id("calls-table")
    job = table.locator(f"tr[data-call='{ids['job']}']")
    expect(job).to_have_attribute("data-depth", "0")
    order = table.locator("tbody tr").evaluate_all("rows => rows.map(r => r.dataset.call)")
    start = order.index(ids["job"])
    assert order[start : start + 3] == [ids["job"], ids["fx"], ids["convert"]], order
    for inner in ("fx", "convert"):
        row = table.locator(f"tr[data-call='{ids[inner]}']")
        expect(row).to_have_attribute("data-depth", "1")
        expect(row).to_have_attribute("data-parent", ids["job"])
    expect(table.locator(f"tr[data-call='{ids['fx']}']")).to_contain_text("120 ms")
    convert = table.locator(f"tr[data-call='{ids['convert']}']")
    expect(convert).to_contain_text("tree_convert")
    expect(convert).to_contain_text("refused")
    expect(convert).to_contain_text("quota: calls per minute (60) used up")
    orphan = table.locator(f"tr[data-call='{ids['format']}']")
    expect(orphan.get_by_test_id("orphan")).to_contain_text(f"inside call {ids['lost']}")
    expect(orphan).to_have_attribute("data-depth", "0")
    both_widths(page, "28-call-tree")

    toggle = job.get_by_role("button", name="Hide the 2 inner calls of tree_job")
    expect(toggle).to_have_attribute("aria-expanded", "true")
    toggle.click()
    expect(table.locator(f"tr[data-parent='{ids['job']}']")).to_have_count(0)
    shown = job.get_by_role("button", name="Show the 2 inner calls of tree_job")
    expect(shown).to_have_attribute("aria-expanded", "false")
    shown.click()
    expect(table.locator(f"tr[data-parent='{ids['job']}']")).to_have_count(2)

    orphan.get_by_role("button", name=ids["lost"]).click()
    expect(page.get_by_label("Inside call")).to_have_value(ids["lost"])
    expect(table.locator("tbody tr")).to_have_count(1)
    expect(table.locator("tbody tr")).to_contain_text("tree_format")
    page.get_by_label("Inside call").fill(ids["job"])
    page.get_by_label("Inside call").press("Enter")
    expect(table.locator("tbody tr[data-call]")).to_have_count(2)
    expect(table.get_by_test_id("orphan")).to_have_count(2)  # their outer call: not in this list
