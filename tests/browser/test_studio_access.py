"""Signing in and out, read-only studio, keys, secrets, and what tool output may never do."""

from __future__ import annotations

import re
from typing import Any

from playwright.sync_api import expect

from support.browser import (
    DESKTOP,
    KEY,
    NARROW,
    Dev,
    Watch,
    assert_accessible,
    both_widths,
    shoot,
    sign_in,
    unreachable_by_keyboard,
)

HOSTILE = """import json
print('<img src=x onerror=alert(1)> <script>alert(2)</script>')
import sys
print('<img src=y onerror=alert(3)>', file=sys.stderr)
"""

PIXEL = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQ"
    "AAAABJRU5ErkJggg=="
)
# The `kiln/content` shape: several MCP content blocks from one run.
HOSTILE_BLOCKS = f"""import json
print(json.dumps({{"kiln/content": [
    {{"type": "text", "text": "<img src=z onerror=alert(4)><script>alert(5)</script>"}},
    {{"type": "resource_link", "uri": "javascript:alert(6)",
      "name": "<b onmouseover=alert(7)>x</b>"}},
    {{"type": "image", "mimeType": "image/png", "data": "{PIXEL}"}},
    {{"type": "image", "mimeType": "image/svg+xml", "data": "PHN2ZyBvbmxvYWQ9YWxlcnQoOSk+"}}
], "structuredContent": {{"nested": {{"html": "<i onclick=alert(10)>i</i>", "n": [1, 2]}}}}}}))
"""


def test_kiln_dev_prints_the_studio_url(dev: Dev) -> None:
    assert f"Studio at {dev.url}/studio/" in dev.log.read_text()


def test_sign_in_keeps_the_key_in_session_storage_only_and_sign_out_forgets_it(
    page: Any, dev: Dev
) -> None:
    sent: list[dict[str, str]] = []
    page.on("request", lambda r: sent.append(r.headers) if "/api/" in r.url else None)
    page.goto("/studio/")
    shoot(page, "00-sign-in")
    assert_accessible(page)
    page.get_by_label("API key").fill("kiln_author_wrong")
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("alert")).to_contain_text("not accepted")
    sign_in(page)
    assert KEY not in page.url
    assert page.evaluate("() => JSON.stringify(localStorage)") == "{}"
    assert page.evaluate("() => document.cookie") == ""
    assert KEY in page.evaluate("() => JSON.stringify(sessionStorage)")
    assert sent  # every API request carries the bearer header and no cookie
    assert all(h.get("authorization", "").startswith("Bearer ") for h in sent)
    assert not any("cookie" in h for h in sent)
    page.reload()
    expect(page.get_by_role("navigation", name="Main")).to_be_visible()  # same tab: still in
    page.get_by_role("button", name="Sign out").click()
    expect(page.get_by_label("API key")).to_be_visible()
    assert KEY not in page.evaluate("() => JSON.stringify(sessionStorage)")
    page.reload()
    expect(page.get_by_label("API key")).to_be_visible()


def test_tool_output_is_shown_as_text_and_never_runs(watched: tuple[Any, Watch], dev: Dev) -> None:
    page, watch = watched
    for name, code in (("hostile", HOSTILE), ("hostile_blocks", HOSTILE_BLOCKS)):
        body = {"name": name, "description": "<b>bold</b><img src=q onerror=alert(8)>"}
        body |= {"language": "python", "code": code}
        assert dev.api("POST", "/api/tools", json=body).status_code == 201
    sign_in(page)
    expect(page.get_by_text("<b>bold</b><img src=q onerror=alert(8)>").first).to_be_visible()
    page.goto("/studio/#/tools/hostile/test")
    page.get_by_role("button", name="Run", exact=True).click()
    stdout = page.get_by_test_id("stdout")
    expect(stdout).to_have_text("<img src=x onerror=alert(1)> <script>alert(2)</script>")
    expect(page.get_by_test_id("stderr")).to_have_text("<img src=y onerror=alert(3)>")
    page.goto("/studio/#/tools/hostile_blocks/test")
    page.get_by_role("button", name="Run", exact=True).click()
    result = page.get_by_test_id("mcp-result")
    expect(result).to_contain_text("<img src=z onerror=alert(4)><script>alert(5)</script>")
    expect(result).to_contain_text("javascript:alert(6)")
    image = result.get_by_role("img", name="Image result 3 (image/png)")
    expect(image).to_have_attribute("src", f"data:image/png;base64,{PIXEL}")
    expect(result).to_contain_text("image of type image/svg+xml not shown")
    tree = result.get_by_test_id("structured")
    expect(tree).to_contain_text("nested")
    expect(tree).to_contain_text('html: "<i onclick=alert(10)>i</i>"')  # a space after the key
    assert page.locator("img[src='x'], img[src='y'], img[src='z'], img[src='q']").count() == 0
    assert page.locator("main script").count() == 0
    assert page.locator("a[href^='javascript']").count() == 0
    result.get_by_text("<b onmouseover=alert(7)>x</b>").hover()
    assert watch.dialogs == []


def test_connect_shows_the_mcp_url_and_client_configurations(page: Any, dev: Dev) -> None:
    sign_in(page)
    page.get_by_role("link", name="Connect", exact=True).click()
    expect(page.get_by_test_id("mcp-url")).to_have_text(f"{dev.url}/mcp")
    for title in (
        "Claude Code",
        "Claude Desktop",
        "Cursor",
        "VS Code",
        "MCP Inspector",
        "Python SDK",
        "TypeScript SDK",
    ):
        expect(page.get_by_role("heading", name=re.compile(title))).to_be_visible()
    shoot(page, "12-connect")
    assert_accessible(page)


# Per snippet on the Connect page: its lines as written, and the lines it takes on screen (the
# distinct tops of its text's boxes); whether it scrolls sideways inside its own block.
SNIPPET_LINES = """() => [...document.querySelectorAll("[data-snippet] pre")].map((pre) => {
    const range = document.createRange();
    range.selectNodeContents(pre);
    const tops = new Set([...range.getClientRects()].filter((r) => r.width > 0)
        .map((r) => Math.round(r.top)));
    return {
        id: pre.closest("[data-snippet]").dataset.snippet,
        written: pre.textContent.split("\\n").filter((line) => line.trim()).length,
        shown: tops.size,
        scrolls: pre.scrollWidth > pre.clientWidth,
        overflowX: getComputedStyle(pre).overflowX,
    };
})"""


def test_connect_snippets_keep_their_lines_and_scroll_inside_their_block(
    page: Any, dev: Dev
) -> None:
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=dev.url)
    sign_in(page)
    page.goto("/studio/#/connect")
    page.get_by_role("checkbox", name="The server requires a key").check()  # the longer lines
    for size in (DESKTOP, NARROW):
        page.set_viewport_size(size)
        snippets = page.evaluate(SNIPPET_LINES)
        assert len(snippets) == 7, snippets
        broken = [s for s in snippets if s["shown"] != s["written"]]
        assert broken == [], f"snippets wrapped mid-line at {size['width']} px: {broken}"
        assert all(s["overflowX"] == "auto" for s in snippets), snippets
        wide = page.evaluate("document.documentElement.scrollWidth")
        assert wide == size["width"], f"the page is {wide} px wide on a {size['width']} px screen"
    assert any(s["scrolls"] for s in snippets), f"no snippet is wider than a phone: {snippets}"
    page.set_viewport_size(DESKTOP)
    both_widths(page, "24-connect-snippets")

    page.set_viewport_size(NARROW)  # Copy takes the whole snippet, its long line included
    card = page.locator("[data-snippet='claude-code']")
    card.get_by_role("button", name="Copy the Claude Code configuration").click()
    expect(card.get_by_role("button", name="Copy the Claude Code configuration")).to_have_text(
        "Copied ✓"
    )
    copied = page.evaluate("navigator.clipboard.readText()")
    assert copied == card.locator("pre").text_content(), copied
    assert copied.startswith("claude mcp add --transport http kiln "), copied
    assert "\n" not in copied, f"the one-line command came out in lines: {copied!r}"


def test_every_control_on_the_main_screens_is_reachable_by_keyboard(page: Any, dev: Dev) -> None:
    body = {"name": "keyboard", "description": "k", "language": "python", "code": "print(1)\n"}
    body |= {"input_schema": {"type": "object", "properties": {"a": {"type": "string"}}}}
    assert dev.api("POST", "/api/tools", json=body).status_code == 201
    sign_in(page)
    screens = ["#/tools", "#/new", "#/keys", "#/connect", "#/connections", "#/deleted", "#/views"]
    screens += ["#/calls"]
    tabs = ["code", "schema", "test", "history", "package", "secrets", "settings", "usage"]
    screens += [f"#/tools/keyboard/{tab}" for tab in tabs]
    for screen in screens:
        page.goto(f"/studio/{screen}")
        page.get_by_role("navigation", name="Main").wait_for()
        page.locator("main h1, main h2").first.wait_for()
        page.wait_for_load_state("networkidle")  # lists and their row controls are in
        assert unreachable_by_keyboard(page) == [], screen
    assert_accessible(page)  # the last screen walked: the Usage tab
    page.goto("/studio/#/tools/keyboard/settings")  # the shot is named for what it shows
    page.get_by_role("textbox", name=re.compile("^Tags")).wait_for()
    shoot(page, "13-settings")
    assert_accessible(page)
