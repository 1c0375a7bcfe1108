"""The connect flow end to end with real clients: the official Python SDK client (2.x) calls a
tool that acts for its caller, gets a URL-mode elicitation for Kiln's /connect page, and its
handler hands the page to Chromium, which goes through Kiln's page, the provider's login and
consent (`oidc-provider`, started locally) and Kiln's callback; the call is then repeated and
the run sees the caller's own token (it asks the provider whose it is).

On 2026-07-28 over HTTP the elicitation is an input request the SDK answers and repeats by
itself; on 2025-11-25 through `kiln stdio --url` (which tells the server what its client
declared at initialize) it is the -32042 error, and the client calls again."""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import support.toolchain as toolchain
from support.acting_tool import acting_tool
from support.browser import DESKTOP, SCREENSHOTS, Dev, open_page
from support.devserver import DevServer, clean_env
from support.oidc_provider import OidcProvider

sync_api = pytest.importorskip("playwright.sync_api")

PY_SDK = "2.3.0"  # the official Python SDK client that speaks 2026-07-28 and URL elicitation
CLIENT = Path(__file__).resolve().parents[1] / "functional" / "clients" / "sdk_url_client.py"
NAME = "whose_account_sdk"
WAIT_S = 120.0

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def sdk() -> Path:
    return toolchain.python_venv(toolchain.CACHE / f"py-mcp-{PY_SDK}", f"mcp=={PY_SDK}")


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[DevServer, OidcProvider]]:
    with acting_tool(tmp_path_factory.mktemp("sdk-connect") / "state", NAME) as running:
        yield running


class Lines:
    """The client's stdout, line by line, each awaited with a deadline (a reader thread)."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def next(self, dev: DevServer) -> dict[str, Any]:
        try:
            line = self._lines.get(timeout=WAIT_S)
        except queue.Empty:
            line = None
        if line is None:
            self.process.kill()
            _, err = self.process.communicate(timeout=30)
            log = dev.log.read_text("utf-8", "replace")[-3000:] if dev.log else ""
            raise AssertionError(f"the SDK client said nothing more:\n{err[-3000:]}\n{log}")
        said: dict[str, Any] = json.loads(line)
        return said

    def close(self) -> None:
        """The client stopped (killed if still running), its stdout read to its end, every
        pipe closed."""
        self.process.kill()
        self.process.wait(timeout=30)
        self._reader.join(timeout=30)
        for pipe in (self.process.stdin, self.process.stdout, self.process.stderr):
            if pipe is not None:
                pipe.close()


def consent_in_chromium(browser: Any, dev: DevServer, url: str, user: str, shots: str) -> None:
    """The person's browser: Kiln's page, the provider's login and consent, Kiln's callback."""
    context, page, watch = open_page(browser, Dev(dev.url, dev.http, Path(str(dev.log))), DESKTOP)
    try:
        page.goto(url)
        sync_api.expect(page.locator("h1")).to_have_text("Connect acme")
        page.screenshot(path=str(SCREENSHOTS / f"{shots}-1-kiln-connect.png"))
        page.locator("#connect").click()
        page.locator("#user").fill(user)
        sync_api.expect(page.locator("#scopes")).to_contain_text("repo")
        page.screenshot(path=str(SCREENSHOTS / f"{shots}-2-provider-consent.png"))
        page.locator("#allow").click()
        sync_api.expect(page.locator("#done")).to_contain_text("acme is connected")
        page.screenshot(path=str(SCREENSHOTS / f"{shots}-3-connected.png"))
    finally:
        context.close()
    assert watch.errors == [], f"the pages logged errors: {watch.errors}"


@pytest.mark.parametrize("wire", ["2026-07-28", "2025-11-25"])
def test_the_sdk_client_connects_through_chromium_and_the_repeated_call_runs_as_the_caller(
    browser: Any, sdk: Path, world: tuple[DevServer, OidcProvider], wire: str
) -> None:
    dev, _ = world
    user = "zoe" if wire == "2026-07-28" else "yann"
    key = dev.create_key(user)
    if wire == "2026-07-28":
        server, mode = f"{dev.url}/mcp", wire
    else:  # a 2025 POST does not say what the client declared: the bridge adds it
        args = ["-m", "kiln.cli", "stdio", "--url", dev.url, "--key", key]
        server = json.dumps({"command": sys.executable, "args": args, "env": clean_env()})
        mode = "legacy"
    process = subprocess.Popen(
        [str(sdk), str(CLIENT), server, key, NAME, mode], stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=clean_env(),
    )  # fmt: skip
    lines = Lines(process)
    try:
        page = lines.next(dev)
        assert page["open"].startswith(f"{dev.url}/connect/"), page
        assert "Connect your acme account" in page["message"], page
        if wire == "2025-11-25":
            assert page["elicitationId"], page
            assert page["open"].rsplit("/", 1)[1] not in page["elicitationId"]
        else:
            assert page["elicitationId"] is None, page  # 2026-07-28 has none
        consent_in_chromium(browser, dev, page["open"], user, f"50-sdk-{wire}")
        assert process.stdin is not None
        process.stdin.write("done\n")
        process.stdin.flush()
        ended = lines.next(dev)
    finally:
        lines.close()
    assert ended["protocol"] == wire, ended
    assert ended["pages"] == 1, ended
    is_error, text = ended["result"]
    assert is_error is False, text
    assert json.loads(text) == {"who": user}
