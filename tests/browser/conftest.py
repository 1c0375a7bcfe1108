"""Fixtures for browser tests: one `kiln dev` and one Chromium for this folder, a watched page
per test (a console error, page error or dialog fails the test).

Package scope, not session: Playwright's sync API keeps an event loop running in this thread
while it is open, and later tests that call asyncio.run() must not find one."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from support.browser import (
    CHROMIUM,
    CHROMIUM_ARGS,
    DESKTOP,
    KEY,
    SCREENSHOTS,
    Dev,
    Watch,
    open_page,
)
from support.devserver import clean_env, serving

sync_api = pytest.importorskip("playwright.sync_api")


@pytest.fixture(scope="package")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dev]:
    """One `kiln dev` process (embedded emulator, no example tools) for the whole session."""
    state = tmp_path_factory.mktemp("kiln-dev-state")
    command = [sys.executable, "-m", "kiln.cli", "dev", "--port", "0"]
    command += ["--state-dir", str(state / "s"), "--author-key", KEY, "--no-examples"]
    log, client = state / "dev.log", httpx.Client(timeout=30)
    with serving(command, log, env=clean_env(), timeout_s=60) as served, client as http:
        yield Dev(served.url, http, state / "dev.log")


@pytest.fixture(scope="package")
def browser() -> Iterator[Any]:
    if not CHROMIUM.exists():
        pytest.fail(
            f"{CHROMIUM} is missing: apt-get install -y chromium (tests/run does: tests/apt_step)"
        )
    # As long as an action's wait (support.browser.open_page): expect()'s own 5 s is short on
    # a suite's four workers on two cores.
    sync_api.expect.set_options(timeout=10_000)
    with sync_api.sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture(scope="package", autouse=True)
def screenshot_folder() -> None:
    # Under xdist every worker runs this: clearing there would race (and delete the other
    # worker's shots); each screenshot's name is fixed, so a rerun overwrites it anyway.
    if "PYTEST_XDIST_WORKER" not in os.environ:
        shutil.rmtree(SCREENSHOTS, ignore_errors=True)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failed browser test's report ends with the tail of `kiln dev`'s log: what the server
    said while the page waited."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    dev = getattr(item, "funcargs", {}).get("dev")
    if report.failed and isinstance(dev, Dev) and dev.log.exists():
        tail = dev.log.read_text("utf-8", errors="replace").splitlines()[-40:]
        report.sections.append(("kiln dev's log, its last 40 lines", "\n".join(tail)))


@pytest.fixture
def watched(browser: Any, dev: Dev) -> Iterator[tuple[Any, Watch]]:
    context, page, watch = open_page(browser, dev, DESKTOP)
    yield page, watch
    context.close()
    assert watch.dialogs == [], f"a dialog opened: {watch.dialogs}"
    assert watch.errors == [], f"console errors: {watch.errors}"


@pytest.fixture
def page(watched: tuple[Any, Watch]) -> Any:
    return watched[0]
