"""Browser test helpers: Debian's Chromium driven by Playwright against a real `kiln dev`.

Every page records console errors, page errors and dialogs; a test that ends with any of them
fails. Screenshots of each main screen go to tests/browser/screenshots/ (desktop and narrow).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from kiln.accounting.ledger import CallLedger
from kiln.aws.clients import AwsClients, make_clients
from kiln.local.emulator import shared_endpoint

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SCREENSHOTS = Path(__file__).resolve().parents[1] / "browser" / "screenshots"
AXE = Path(__file__).resolve().parents[1] / "browser" / "vendor" / "axe.min.js"
KEY = "browser-test-author-key-0123456789"
DESKTOP = {"width": 1440, "height": 900}
NARROW = {"width": 390, "height": 844}


@dataclass
class Dev:
    url: str
    http: httpx.Client
    log: Path

    def api(self, method: str, path: str, **kw: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {KEY}", **kw.pop("headers", {})}
        return self.http.request(method, self.url + path, headers=headers, **kw)

    def clients(self) -> AwsClients:
        """Clients of this `kiln dev`'s emulator, to read or seed its table directly."""
        endpoint = self._endpoint()
        keys = (endpoint.credentials.access_key_id, endpoint.credentials.secret_access_key)
        return make_clients(endpoint_url=endpoint.url, region=endpoint.region, credentials=keys)

    def ssm(self) -> Any:
        """An SSM client of this `kiln dev`'s emulator (where its secrets are)."""
        return self.clients().session.client("ssm", endpoint_url=self._endpoint().url)

    def _endpoint(self) -> Any:
        endpoint = shared_endpoint(self.log.parent / "s" / "aws")
        assert endpoint is not None, f"no emulator described in {self.log.parent / 's' / 'aws'}"
        return endpoint

    def ledger(self) -> CallLedger:
        """The ledger of this `kiln dev`'s table, for seeding entries straight into it."""
        return CallLedger(self.clients().dynamodb, table="kiln", digest_key=b"seed")


@dataclass
class Watch:
    """What a page did that it must not: console errors, uncaught errors, dialogs."""

    errors: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)

    def console(self, kind: str, text: str) -> None:
        # Chromium logs every 4xx answer; the studio shows those (412, 422) on purpose.
        if kind == "error" and not re.match(r"Failed to load resource: .* status of 4\d\d", text):
            self.errors.append(text)


def open_page(browser: Any, dev: Dev, viewport: dict[str, int]) -> tuple[Any, Any, Watch]:
    context = browser.new_context(viewport=viewport, base_url=dev.url)
    context.set_default_timeout(10_000)
    page = context.new_page()
    watch = Watch()
    page.on("console", lambda m: watch.console(m.type, m.text))
    page.on(
        "response",
        lambda r: watch.errors.append(f"{r.status} {r.url}") if r.status >= 500 else None,
    )
    page.on("pageerror", lambda e: watch.errors.append(str(e)))

    def on_dialog(dialog: Any) -> None:
        watch.dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", on_dialog)
    return context, page, watch


def sign_in(page: Any, key: str = KEY) -> None:
    page.goto("/studio/")
    page.get_by_label("API key").fill(key)
    page.get_by_role("button", name="Sign in").click()
    page.get_by_role("navigation", name="Main").wait_for()


def shoot(page: Any, name: str) -> None:
    """Save the screen at the page's width and at a phone's width."""
    size = page.viewport_size
    page.screenshot(path=str(SCREENSHOTS / f"{name}-desktop.png"), full_page=True)
    page.set_viewport_size(NARROW)
    page.screenshot(path=str(SCREENSHOTS / f"{name}-narrow.png"), full_page=True)
    page.set_viewport_size(size)


def axe_violations(page: Any) -> list[dict[str, Any]]:
    """axe-core's serious and critical findings on the current screen."""
    # Evaluated over the DevTools protocol: the studio's CSP (rightly) refuses a <script> tag.
    page.evaluate(AXE.read_text())
    results = page.evaluate("async () => (await axe.run(document)).violations")
    return [
        {"id": v["id"], "impact": v["impact"], "nodes": [n["target"] for n in v["nodes"]][:5]}
        for v in results
        if v["impact"] in ("serious", "critical")
    ]


def assert_accessible(page: Any) -> None:
    found = axe_violations(page)
    assert not found, json.dumps(found, indent=1)


def both_widths(page: Any, name: str) -> None:
    """axe finds nothing at 1440x900 and at 390x844, where the page does not scroll sideways;
    the screen is photographed at both widths."""
    assert_accessible(page)
    shoot(page, name)
    page.set_viewport_size(NARROW)
    try:
        page.wait_for_timeout(150)  # layout settles (media queries, the tab row's scroll)
        assert_accessible(page)
        wide = page.evaluate("document.documentElement.scrollWidth")
        assert wide == NARROW["width"], f"{name}: the page is {wide} px wide on a 390 px screen"
    finally:
        page.set_viewport_size(DESKTOP)


INTERACTIVE = (
    "a[href], button:not([disabled]), input:not([disabled]), select:not([disabled]), "
    "textarea:not([disabled]), summary, [tabindex='0']"
)


def unreachable_by_keyboard(page: Any) -> list[str]:
    """Visible controls that Tab never reaches from the top of the page.

    In a code editor Tab indents (as authors expect); Escape then Tab leaves it, CodeMirror's
    documented way out, so the walk presses Escape before every Tab (elsewhere it does nothing).
    """
    settled, count = -1, 0
    while count != settled:  # a list that arrives late adds its controls; wait till they stop
        settled = count
        page.wait_for_timeout(300)
        count = page.locator(INTERACTIVE).count()
    count = page.evaluate(
        """(selector) => {
            const all = [...document.querySelectorAll(selector)].filter((el) => {
                const box = el.getBoundingClientRect();
                const shown = getComputedStyle(el).visibility !== "hidden";
                return box.width > 0 && box.height > 0 && shown;
            });
            all.forEach((el, i) => (el.dataset.kbd = String(i)));
            window.kbdReached = new Set();
            document.addEventListener("focusin", (e) => {
                const id = e.target?.dataset?.kbd;
                if (id !== undefined) window.kbdReached.add(id);
            });
            document.activeElement?.blur();
            window.scrollTo(0, 0);
            return all.length;
        }""",
        INTERACTIVE,
    )
    # Twice round: Tab starts from wherever focus last was (not always the top), and a screen
    # may add controls (rows of a list arriving) after they were counted.
    for _ in range(2 * count + 3):
        page.keyboard.press("Escape")
        page.keyboard.press("Tab")
    missing = page.evaluate(
        """() => [...document.querySelectorAll('[data-kbd]')]
            .filter((el) => !window.kbdReached.has(el.dataset.kbd))
            .map((el) => el.outerHTML.slice(0, 120))"""
    )
    return list(missing)


def set_code(page: Any, code: str) -> None:
    editor = page.get_by_role("textbox", name="Code")
    editor.click()
    page.keyboard.press("Control+A")
    page.keyboard.press("Delete")
    # CodeMirror auto-indents typed newlines; inserting the text at once keeps it as written.
    # The old text is deleted first: Chromium's native replace of a highlighted selection
    # copies its colours into a style attribute, which the studio's CSP (rightly) refuses.
    page.keyboard.insert_text(code)
