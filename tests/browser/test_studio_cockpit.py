"""The studio as the authors' cockpit: a save keeps every manifest field; views, keys with their
quotas and use, the call ledger and a tool's charts on screen, read back against what was
seeded; every screen checked by axe at desktop and phone width, photographed at both."""

from __future__ import annotations

import base64
import dataclasses
import re
import time
import typing
from datetime import UTC, datetime
from typing import Any

import pytest
from playwright.sync_api import expect

from kiln.accounting.ledger import CallRecord
from kiln.catalog.model import Draft, TaskMode
from support.browser import Dev, both_widths, sign_in

ECHO = "import json, sys\nprint(json.dumps(json.load(sys.stdin)))\n"
MANIFEST = [field.name for field in dataclasses.fields(Draft)]


def make_tool(dev: Dev, name: str, **fields: Any) -> dict[str, Any]:
    body = {"name": name, "description": "d", "language": "python", "code": ECHO, **fields}
    reply = dev.api("POST", "/api/tools", json=body)
    assert reply.status_code == 201, reply.text
    return dict(reply.json())


def head(dev: Dev, name: str) -> dict[str, Any]:
    reply = dev.api("GET", f"/api/tools/{name}")
    assert reply.status_code == 200, reply.text
    return dict(reply.json())


# -- every manifest field kept ----------------------------------------------------------------


def test_saving_from_the_studio_keeps_every_manifest_field(page: Any, dev: Dev) -> None:
    every = {
        "title": "Slow report",
        "requirements": ["requests>=2"],
        # The author's order, not the alphabet's: zeta before alpha.
        "input_schema": {
            "type": "object",
            "properties": {"zeta": {"type": "string"}, "alpha": {"type": "integer"}},
            "required": ["zeta"],
        },
        "output_schema": {"type": "object", "properties": {"ok": {"type": "boolean"}}},
        "annotations": {"readOnlyHint": True, "openWorldHint": False},
        "timeout_seconds": 45,
        "enabled": False,
        "secrets": ["API_TOKEN"],
        "files": {"rates.json": base64.b64encode(b'{"uk": 20}').decode()},
        "task": "optional",
        "tags": ["finance", "uk"],
    }
    make_tool(dev, "slow_report", **every)
    before = head(dev, "slow_report")
    missing = [field for field in MANIFEST if field not in before]
    assert not missing, f"GET /api/tools/slow_report lacks {missing}"

    sign_in(page)
    page.goto("/studio/#/tools/slow_report/code")
    page.get_by_label("Description").fill("Builds the slow report.")
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_text("Saved as revision 2.")).to_be_visible(timeout=30_000)
    after = head(dev, "slow_report")
    assert after["revision"] == 2
    changed = {f: (before[f], after[f]) for f in MANIFEST if before[f] != after[f]}
    assert changed == {"description": ("d", "Builds the slow report.")}, changed
    assert list(after["input_schema"]["properties"]) == ["zeta", "alpha"]

    page.get_by_role("link", name="Settings").click()
    expect(page.get_by_role("textbox", name=re.compile("^Tags"))).to_have_value("finance uk")
    expect(page.get_by_role("combobox", name=re.compile("^Runs as an MCP task"))).to_have_value(
        "optional"
    )
    page.get_by_role("textbox", name=re.compile("^Tags")).fill("finance uk eu")
    page.get_by_role("combobox", name=re.compile("^Runs as an MCP task")).select_option("required")
    both_widths(page, "20-settings-tags-task")
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_text("Saved as revision 3.")).to_be_visible(timeout=30_000)
    third = head(dev, "slow_report")
    assert third["tags"] == ["finance", "uk", "eu"]  # as typed, not re-sorted
    assert third["task"] == "required"
    changed = {f for f in MANIFEST if after[f] != third[f]}
    assert changed == {"tags", "task"}, changed

    page.get_by_role("link", name="Schemas").click()  # the form follows the author's order
    names = page.locator("[data-schema='input-schema']").get_by_label("Name", exact=True)
    expect(names).to_have_count(2)
    assert [names.nth(i).input_value() for i in range(2)] == ["zeta", "alpha"]


def test_a_broken_tag_is_named_at_its_field_in_plain_words(page: Any, dev: Dev) -> None:
    make_tool(dev, "tagged_badly")
    sign_in(page)
    page.goto("/studio/#/tools/tagged_badly/settings")
    page.get_by_role("textbox", name=re.compile("^Tags")).fill("ok Not_OK")
    error = page.locator("#e-tags")
    expect(error).to_contain_text("Line 2: must be 1-32 characters from a-z 0-9 _ -")
    assert "rule:" not in error.locator("span").first.inner_text()
    expect(page.locator(".tabs a.active .dot")).to_have_count(1)


def test_every_task_mode_shows_on_settings_and_a_save_keeps_it(page: Any, dev: Dev) -> None:
    make_tool(dev, "asks_first", task="ask_first")
    sign_in(page)
    page.goto("/studio/#/tools/asks_first/settings")
    task = page.get_by_role("combobox", name=re.compile("^Runs as an MCP task"))
    expect(task).to_have_value("ask_first")  # a mode the select lacks reads "" (a blank choice)
    shown = task.evaluate("(s) => s.selectedOptions[0]?.textContent ?? ''")
    assert shown.startswith("Ask first"), f"the saved mode ask_first shows as {shown!r}"
    offered = task.evaluate("(s) => [...s.options].map((o) => o.value)")
    assert sorted(offered) == sorted(["", *typing.get_args(TaskMode)]), offered
    both_widths(page, "22-settings-ask-first")

    page.get_by_role("textbox", name=re.compile("^Tags")).fill("slow")  # a change elsewhere
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_text("Saved as revision 2.")).to_be_visible(timeout=30_000)
    assert head(dev, "asks_first")["task"] == "ask_first", "a save changed the task mode"
    expect(task).to_have_value("ask_first")
    for revision, mode in enumerate(["optional", "required", "", "ask_first"], start=3):
        task.select_option(mode)
        page.get_by_role("button", name="Save").click()
        expect(page.get_by_text(f"Saved as revision {revision}.")).to_be_visible(timeout=30_000)
        assert head(dev, "asks_first")["task"] == (mode or None), mode
        expect(task).to_have_value(mode)  # as read back after the save


# -- not found ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "route", ["#/tools/nothing_here/code", "#/tools/x/packages", "#/nowhere", "#/views/a/b"]
)
def test_an_unknown_route_says_not_found_with_a_way_back(page: Any, route: str) -> None:
    sign_in(page)
    page.goto(f"/studio/{route}")
    found = page.get_by_test_id("not-found")
    expect(found).to_contain_text("Not found")
    if route == "#/nowhere":
        both_widths(page, "21-not-found")
    found.get_by_role("link", name="Back to the tools").click()
    expect(page.get_by_role("heading", name="Tools", exact=True)).to_be_visible()


# -- views and keys -----------------------------------------------------------------------------


def test_an_author_builds_a_view_and_binds_a_key_whose_use_the_keys_page_shows(
    page: Any, dev: Dev
) -> None:
    make_tool(dev, "vat_rate", tags=["finance"])
    make_tool(dev, "fx_rate")
    make_tool(dev, "gbp_rate")
    sign_in(page)
    page.get_by_role("link", name="Views", exact=True).click()
    page.get_by_label("Name", exact=True).fill("finance")
    page.get_by_label(re.compile("^Tools")).fill("tag:finance")
    page.get_by_role("button", name="Create view").click()
    expect(page.get_by_role("heading", name="finance")).to_be_visible()
    tools = page.get_by_label("Tool", exact=True)
    expect(tools.locator("option", has_text="fx_rate")).to_have_count(1)
    tools.select_option("fx_rate")
    page.get_by_label("Revision").select_option("1")
    page.get_by_role("button", name="Add tool").click()
    tools.select_option("gbp_rate")
    page.get_by_label("Revision").select_option(label="pin its fingerprint (r1 as it is now)")
    page.get_by_role("button", name="Add tool").click()
    page.get_by_label("Published on its own URL").check()
    page.get_by_label("Calls per minute").fill("500")
    page.get_by_role("button", name="Save view").click()
    expect(page.get_by_text("Saved view finance.")).to_be_visible(timeout=30_000)
    expect(page.get_by_test_id("view-url")).to_have_text(f"{dev.url}/mcp/v/finance")
    shows = page.get_by_test_id("view-shows")
    expect(shows).to_contain_text("vat_rate")
    expect(shows).to_contain_text("fx_rate")
    saved = dev.api("GET", "/api/views/finance").json()
    gbp = dev.api("GET", "/api/tools/gbp_rate").json()["fingerprint"]
    assert saved["tools"] == ["tag:finance", "fx_rate@1", f"gbp_rate@{gbp}"], saved
    assert saved["published"] is True
    assert saved["quota"] == {"calls_per_minute": 500}
    both_widths(page, "22-view")
    page.get_by_role("link", name="← Views").click()
    expect(page.get_by_role("cell", name=re.compile("^finance"))).to_be_visible()
    both_widths(page, "23-views")

    page.get_by_role("link", name="Keys", exact=True).click()
    # The views page's own Name field is gone first: a fill must not land in the page left.
    expect(page.get_by_role("heading", name="API keys")).to_be_visible()
    page.get_by_label("Name", exact=True).fill("partner")
    page.get_by_label(re.compile("^View")).select_option("finance")
    page.get_by_label("Calls per minute").fill("50")
    page.get_by_role("button", name="Create key").click()
    key = page.get_by_test_id("new-key").locator("code").inner_text()
    for n in range(2):
        answer = call(dev, "vat_rate", key, rid=n)
        assert answer.status_code == 200, answer.text
        assert answer.json()["result"]["isError"] is False, answer.text
    page.reload()
    row = page.get_by_role("row", name=re.compile("partner"))
    expect(row.get_by_role("link", name="finance")).to_be_visible()
    expect(row.get_by_test_id("key-quota")).to_contain_text("50 calls/min")
    expect(row.get_by_test_id("key-quota")).to_contain_text("2 of 50 calls this minute")
    both_widths(page, "24-keys-bound")


def test_a_view_saved_in_the_studio_sets_search_and_code_mode_and_keeps_its_approvals(
    page: Any, dev: Dev
) -> None:
    make_tool(dev, "wipe_cache")
    made = dev.api("PUT", "/api/views/careful",
                   json={"tools": ["wipe_cache"], "confirm": "destructive"})  # fmt: skip
    assert made.status_code in (200, 201), made.text
    sign_in(page)
    page.get_by_role("link", name="Views", exact=True).click()
    page.get_by_role("link", name="careful").click()
    expect(page.get_by_role("heading", name="careful")).to_be_visible()
    page.get_by_label("How clients see its tools").select_option("search")
    page.get_by_role("button", name="Save view").click()
    expect(page.get_by_text("Saved view careful.")).to_be_visible(timeout=30_000)
    saved = dev.api("GET", "/api/views/careful").json()
    assert saved["mode"] == "search", saved
    assert saved["confirm"] == "destructive", saved  # the page does not edit it: kept
    page.reload()
    expect(page.get_by_label("How clients see its tools")).to_have_value("search")
    page.get_by_label("How clients see its tools").select_option("code")
    page.get_by_role("button", name="Save view").click()
    expect(page.get_by_text("Saved view careful.")).to_be_visible(timeout=30_000)
    assert dev.api("GET", "/api/views/careful").json()["mode"] == "code"


def call(dev: Dev, tool: str, key: str, rid: int = 1) -> Any:
    body = {"jsonrpc": "2.0", "id": rid, "method": "tools/call",
            "params": {"name": tool, "arguments": {}}}  # fmt: skip
    headers = {"Accept": "application/json, text/event-stream", "Authorization": f"Bearer {key}",
               "MCP-Protocol-Version": "2025-11-25"}  # fmt: skip
    return dev.http.post(dev.url + "/mcp", json=body, headers=headers)


# -- the ledger on screen -----------------------------------------------------------------------

# (outcome, duration ms, view) of the calls seeded a few minutes ago for `charted`: 12 calls, 3
# errors (tool_error, timeout) of the 9 that could start (3 came while its packages built),
# durations of those that ran 100..1000 ms: p50 400, p99 1000.
SEEDED = [
    ("ok", 100.0, "finance"), ("ok", 200.0, None), ("ok", 300.0, None), ("ok", 400.0, None),
    ("tool_error", 500.0, "finance"), ("tool_error", 600.0, "finance"), ("timeout", 1000.0, None),
    ("refused", 0.0, None), ("cancelled", 800.0, None),
    ("not_ready", 0.0, None), ("not_ready", 0.0, None), ("not_ready", 0.0, None),
]  # fmt: skip
OLDER = [("ok", 50.0, None), ("ok", 50.0, None)]  # three days ago: only in the 30-day chart


def seed(dev: Dev, tool: str, view: str = "finance") -> float:
    """Write SEEDED (two minutes ago) and OLDER for `tool` straight into the ledger's table."""
    ledger = dev.ledger()
    at = time.time() - 120
    for plan, when in ((SEEDED, at), (OLDER, at - 3 * 86_400)):
        for outcome, duration, where in plan:
            entry = CallRecord(
                at="",
                caller="key:seeder",
                tool=tool,
                outcome=outcome,  # type: ignore[arg-type]
                revision=1,
                view=view if where else None,
                duration_ms=duration,
            )
            ledger.record(entry, started=when)
    ledger.record(CallRecord(at="", caller="key:seeder", tool=f"{tool}_other", outcome="ok"),
                  started=at)  # fmt: skip
    ledger.day_totals.flush()  # this process's totals (the tool list reads them), written now
    return at


def test_the_charts_show_the_seeded_calls_and_the_list_their_recent_use(
    page: Any, dev: Dev
) -> None:
    make_tool(dev, "charted")
    at = seed(dev, "charted")
    sign_in(page)
    row = page.get_by_role("row", name=re.compile("charted"))
    expect(row.get_by_test_id("calls-recent")).to_have_text("12")
    expect(row.get_by_test_id("errors-recent")).to_have_text("33.3% (3)")  # not_ready: left out
    both_widths(page, "25-tools-usage")

    page.goto("/studio/#/tools/charted/usage")
    expect(page.get_by_test_id("total-calls")).to_have_text("12")
    expect(page.get_by_test_id("total-errors")).to_have_text("3")
    expect(page.get_by_test_id("total-p50")).to_have_text("400 ms")
    expect(page.get_by_test_id("total-p99")).to_have_text("1 s")
    expected = {"ok": "4", "tool_error": "2", "timeout": "1", "refused": "1", "cancelled": "1",
                "not_ready": "3"}  # fmt: skip
    for outcome, count in expected.items():
        expect(page.get_by_test_id(f"outcome-{outcome}")).to_have_text(count)
    hour = datetime.fromtimestamp(at - at % 3600, UTC).strftime("%Y-%m-%d %H:%M")
    bucket = page.get_by_test_id("usage-table").get_by_role("row", name=re.compile(hour))
    expect(bucket).to_have_text(re.compile(rf"{hour}\s*12\s*3\s*400 ms\s*1 s"))
    bars = page.locator("svg rect.calls title")
    expect(bars).to_have_count(1)
    expect(bars.first).to_have_text(re.compile(r": 12 calls$"))
    both_widths(page, "26-usage-day")

    page.get_by_role("button", name="Last 30 days").click()
    # 31 days: a read of each day's shard count, and a query of each shard of the two days
    # with calls (kiln.accounting.ledger_shards; kiln dev writes one shard a day). The timeout
    # is for a loaded machine.
    expect(page.get_by_test_id("total-calls")).to_have_text("14", timeout=30_000)
    expect(page.locator("svg rect.calls")).to_have_count(2)
    page.get_by_role("button", name="Last hour").click()
    expect(page.get_by_test_id("total-calls")).to_have_text("12")

    page.get_by_role("button", name="See these calls").click()
    table = page.get_by_test_id("calls-table")
    expect(table.locator("tbody tr")).to_have_count(12)  # the tool filter came along
    page.get_by_label("Outcome").select_option("tool_error")
    expect(table.locator("tbody tr")).to_have_count(2)
    expect(table).to_contain_text("600 ms")
    page.get_by_label("Outcome").select_option("")
    page.get_by_label("Time").select_option("month")
    expect(table.locator("tbody tr")).to_have_count(14, timeout=30_000)
    page.get_by_label("Time").select_option("day")
    page.get_by_label("Tool", exact=True).select_option("")
    expect(table).to_contain_text("charted_other")  # every tool's calls again
    both_widths(page, "27-calls")


def test_the_calls_screen_filters_by_view_and_caller(page: Any, dev: Dev) -> None:
    make_tool(dev, "charted_too")
    seed(dev, "charted_too", view="seeded")
    made = dev.api("POST", "/api/views", json={"name": "seeded", "tools": ["charted_too"]})
    assert made.status_code == 201, made.text
    sign_in(page)
    page.get_by_role("link", name="Calls", exact=True).click()
    table = page.get_by_test_id("calls-table")
    view = page.get_by_label("View")
    expect(view.locator("option", has_text="seeded")).to_have_count(1)
    view.select_option("seeded")
    expect(table.locator("tbody tr")).to_have_count(3)  # the three seeded through the view
    for i in range(3):
        expect(table.locator("tbody tr").nth(i)).to_contain_text("seeded")
    page.get_by_label("Caller").select_option("anonymous")
    expect(table).to_contain_text("No calls match.")
