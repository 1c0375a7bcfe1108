"""A person connects their account in Chromium: Kiln's /connect page, the provider's real
consent page (`oidc-provider`, started locally), and back to Kiln's callback."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from support.browser import KEY, SCREENSHOTS, Dev
from support.oidc_provider import OidcProvider, oidc_provider

sync_api = pytest.importorskip("playwright.sync_api")


@pytest.fixture(scope="module")
def provider(dev: Dev) -> Iterator[OidcProvider]:
    with oidc_provider() as running:
        client_id, secret = running.register(f"{dev.url}/connect/callback")
        body = {"issuer": running.issuer, "client_id": client_id, "client_secret": secret}
        added = dev.api("PUT", "/api/connections/providers/acme-browser", json=body)
        assert added.status_code == 200, added.text
        yield running


def test_a_person_connects_through_the_consent_page_in_chromium(
    page: Any, dev: Dev, provider: OidcProvider
) -> None:
    made = dev.api("POST", "/api/keys", json={"name": "erin-browser", "scope": "call"})
    assert made.status_code == 201, made.text
    erin = {"Authorization": f"Bearer {made.json()['key']}"}
    started = dev.http.post(f"{dev.url}/api/connections/acme-browser/connect", headers=erin,
                            json={"scopes": ["repo"]})  # fmt: skip
    assert started.status_code == 200, started.text
    page.goto(started.json()["url"])
    sync_api.expect(page.locator("h1")).to_have_text("Connect acme-browser")
    page.screenshot(path=str(SCREENSHOTS / "40-connect-page.png"))
    page.locator("#connect").click()
    page.locator("#user").fill("erin")
    sync_api.expect(page.locator("#scopes")).to_contain_text("repo")
    page.locator("#allow").click()
    sync_api.expect(page.locator("#done")).to_contain_text("acme-browser is connected")
    page.screenshot(path=str(SCREENSHOTS / "41-connected.png"))
    mine = httpx.get(f"{dev.url}/api/connections", headers=erin).json()["connections"]
    assert [(c["provider"], "repo" in c["scopes"]) for c in mine] == [("acme-browser", True)]
    assert KEY not in page.content()
