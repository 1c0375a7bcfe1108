"""The studio's Connections screen and a tool's declared connections, in Chromium against a
real `kiln dev` and a real OAuth provider (`oidc-provider`, started locally): an operator adds
a provider (bad input refused at its field, nothing saved); a person connects in advance
through Kiln's /connect page in a new tab, sees the connection listed, revokes it and it is gone
from the vault; the operator revokes anyone's; a tool's `connections` are edited and saved."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from support.browser import KEY, Dev, both_widths, sign_in
from support.oidc_provider import OidcProvider, oidc_provider

sync_api = pytest.importorskip("playwright.sync_api")
expect = sync_api.expect

AHEAD = "acme-ahead"  # registered over REST for the connect tests


@pytest.fixture(scope="module")
def provider(dev: Dev) -> Iterator[OidcProvider]:
    with oidc_provider() as running:
        client_id, secret = running.register(f"{dev.url}/connect/callback")
        body = {"issuer": running.issuer, "client_id": client_id, "client_secret": secret,
                "scopes": ["openid"]}  # fmt: skip
        added = dev.api("PUT", f"/api/connections/providers/{AHEAD}", json=body)
        assert added.status_code == 200, added.text
        yield running


def call_key(dev: Dev, name: str) -> tuple[str, str]:
    """A new call key: (the key, its vault identity `key:<id>`)."""
    made = dev.api("POST", "/api/keys", json={"name": name, "scope": "call"})
    assert made.status_code == 201, made.text
    return made.json()["key"], f"key:{made.json()['id']}"


def vault_items(dev: Dev, identity: str) -> list[dict[str, Any]]:
    """The vault's records for one caller, read straight from the table."""
    found = dev.clients().dynamodb.query(
        TableName="kiln",
        KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues={":pk": {"S": f"CONNECTION#{identity}"}},
        ConsistentRead=True,
    )
    return list(found.get("Items", []))


def secret_paths(ssm: Any, provider: str) -> list[str]:
    """Where this `kiln dev` keeps a provider's client secret (under its secrets prefix)."""
    found = ssm.describe_parameters(
        ParameterFilters=[{"Key": "Name", "Option": "Contains", "Values": [f"/{provider}/"]}]
    )["Parameters"]
    wanted = f"/_connections/{provider}/client_secret"
    return [str(p["Name"]) for p in found if p["Name"].endswith(wanted)]


def connect_in_a_new_tab(page: Any, provider: OidcProvider, user: str, scopes: str) -> None:
    """Connect… on the Connections screen; consent as `user` in the tab it opens."""
    page.locator("#c-provider").select_option(AHEAD)
    page.get_by_label("More scopes").fill(scopes)
    with page.expect_popup() as opened:
        page.get_by_role("button", name="Connect…").click()
    tab = opened.value
    expect(tab.locator("h1")).to_have_text(f"Connect {AHEAD}")
    tab.locator("#connect").click()
    tab.locator("#user").fill(user)
    tab.locator("#allow").click()
    expect(tab.locator("#done")).to_contain_text(f"{AHEAD} is connected", timeout=20_000)
    tab.close()


def test_an_operator_adds_a_provider_bad_input_refused_at_its_field_and_nothing_saved(
    page: Any, dev: Dev, provider: OidcProvider
) -> None:
    client_id, secret = provider.register(f"{dev.url}/connect/callback")
    sign_in(page)
    page.get_by_role("link", name="Connections", exact=True).click()
    expect(page.get_by_test_id("redirect-uri")).to_have_text(f"{dev.url}/connect/callback")
    page.locator("#p-name").fill("acme-studio")
    page.get_by_label("Endpoints from").select_option("endpoints")
    page.get_by_label("Authorize URL").fill("http://example.com/authorize")
    page.get_by_label("Token URL").fill("https://example.com/token")
    page.get_by_label("Client ID").fill(client_id)
    page.get_by_label("Client secret").fill(secret)
    page.get_by_role("button", name="Add provider").click()
    said = page.locator("#e-p-authorize_url")
    expect(said).to_contain_text("Must be an https URL (http only on loopback)")
    expect(page.get_by_label("Authorize URL")).to_have_attribute("aria-invalid", "true")
    expect(page.get_by_label("Client secret")).to_have_value("")  # not kept on screen

    page.get_by_label("Endpoints from").select_option("issuer")  # one that publishes nothing
    page.get_by_label("Issuer URL").fill(f"{provider.issuer}/nowhere")
    page.locator("#p-scopes").fill('openid bad"scope')
    page.get_by_role("button", name="Add provider").click()
    expect(page.locator("#e-p-issuer")).to_contain_text("no OAuth or OpenID metadata")
    listed = dev.api("GET", "/api/connections/providers").json()["providers"]
    assert "acme-studio" not in [p["name"] for p in listed]  # nothing saved
    both_widths(page, "51-provider-refused")

    page.get_by_label("Issuer URL").fill(provider.issuer)
    page.get_by_role("button", name="Add provider").click()
    expect(page.locator("#e-p-scopes")).to_contain_text("'bad\"scope' is not an OAuth scope token")
    page.locator("#p-scopes").fill("openid")
    page.get_by_label("Client secret").fill(secret)
    page.get_by_role("button", name="Add provider").click()
    expect(page.get_by_text("acme-studio added.")).to_be_visible()
    row = page.get_by_test_id("provider").filter(has_text="acme-studio")
    expect(row).to_contain_text(f"{provider.issuer}/auth")  # endpoints from the metadata
    expect(row).to_contain_text(client_id)
    assert secret not in page.content()
    found = dev.api("GET", "/api/connections/providers").json()["providers"]
    assert [p["scopes"] for p in found if p["name"] == "acme-studio"] == [["openid"]]
    assert secret not in dev.api("GET", "/api/connections/providers").text

    row.get_by_role("button", name="Change acme-studio").click()  # the secret left empty
    expect(page.locator("#p-client-id")).to_have_value(client_id)
    expect(page.get_by_label("Client secret")).to_have_value("")
    page.locator("#p-scopes").fill("openid profile")
    page.get_by_role("button", name="Save provider").click()
    expect(page.get_by_text("acme-studio changed.")).to_be_visible()
    expect(row).to_contain_text("profile")
    ssm = dev.ssm()
    [path] = secret_paths(ssm, "acme-studio")
    kept = ssm.get_parameter(Name=path, WithDecryption=True)
    assert kept["Parameter"]["Value"] == secret  # an empty secret field keeps the stored one

    row.get_by_role("button", name="Remove… acme-studio").click()
    page.get_by_role("button", name="Remove acme-studio").click()
    expect(page.get_by_test_id("provider").filter(has_text="acme-studio")).to_have_count(0)
    assert secret_paths(ssm, "acme-studio") == []  # its client secret went with it


def test_a_person_connects_in_advance_sees_it_listed_and_revokes_it(
    browser: Any, dev: Dev, provider: OidcProvider
) -> None:
    key, identity = call_key(dev, "frank-studio")
    context = browser.new_context(base_url=dev.url, viewport={"width": 1440, "height": 900})
    page = context.new_page()
    problems: list[str] = []
    page.on("pageerror", lambda e: problems.append(str(e)))
    sign_in(page, key)
    page.get_by_role("link", name="Connections", exact=True).click()
    expect(page.get_by_role("heading", name="Add a provider")).to_have_count(0)  # a call key
    expect(page.get_by_role("heading", name="Everyone's connections")).to_have_count(0)
    connect_in_a_new_tab(page, provider, "frank", "repo")
    mine = page.get_by_test_id("connection")
    expect(mine).to_have_count(1)
    expect(mine).to_contain_text(AHEAD)
    expect(mine).to_contain_text("repo")
    expect(mine).to_contain_text(re.compile(r"in (59|60) min"))
    assert len(vault_items(dev, identity)) == 1
    assert key not in page.content()
    both_widths(page, "50-connections")

    mine.get_by_role("button", name=f"Revoke… {AHEAD}").click()
    page.get_by_role("button", name=f"Revoke {AHEAD}").click()
    expect(page.get_by_text(f"{AHEAD} revoked.")).to_be_visible()
    expect(page.get_by_test_id("connection")).to_have_count(0)
    assert vault_items(dev, identity) == []
    context.close()
    assert problems == []


def test_the_operator_sees_everyones_connections_and_revokes_one(
    browser: Any, page: Any, dev: Dev, provider: OidcProvider
) -> None:
    key, identity = call_key(dev, "gina-studio")
    person = browser.new_context(base_url=dev.url)
    theirs = person.new_page()
    sign_in(theirs, key)
    theirs.get_by_role("link", name="Connections", exact=True).click()
    connect_in_a_new_tab(theirs, provider, "gina", "")
    expect(theirs.get_by_test_id("connection")).to_have_count(1)
    person.close()

    sign_in(page, KEY)
    page.get_by_role("link", name="Connections", exact=True).click()
    everyone = page.get_by_role("region", name="Everyone's connections")
    row = everyone.get_by_test_id("connection").filter(has_text="gina-studio")  # the key's name
    expect(row).to_contain_text(AHEAD)
    row.get_by_role("button", name=f"Revoke… {AHEAD} for gina-studio").click()
    page.get_by_role("button", name=f"Revoke {AHEAD} for gina-studio").click()
    expect(page.get_by_text(f"{AHEAD} revoked for gina-studio.")).to_be_visible()
    expect(everyone.get_by_test_id("connection").filter(has_text="gina-studio")).to_have_count(0)
    assert vault_items(dev, identity) == []


def test_a_tools_connections_show_on_settings_refused_at_their_field_and_saved(
    page: Any, dev: Dev, provider: OidcProvider
) -> None:
    tool = {"name": "acts_for_you", "description": "Uses the caller's account.",
            "language": "python", "code": "print('hi')\n",
            "connections": [{"provider": AHEAD, "scopes": ["repo"]}]}  # fmt: skip
    made = dev.api("POST", "/api/tools", json=tool)
    assert made.status_code == 201, made.text
    sign_in(page)
    page.goto("/studio/#/tools/acts_for_you/settings")
    rows = page.get_by_test_id("tool-connection")
    expect(rows).to_have_count(1)
    expect(page.locator("#tc-provider-0")).to_have_value(AHEAD)
    expect(page.locator("#tc-scopes-0")).to_have_value("repo")
    expect(rows.first).to_contain_text("KILN_CONNECTION_ACME_AHEAD")

    page.get_by_role("button", name="Add a connection").click()
    page.locator("#tc-provider-1").fill("Not A Name")
    expect(page.locator("#e-tc-provider-1")).to_contain_text("Must be a provider name")
    page.locator("#tc-provider-1").fill("slack")
    expect(rows.nth(1)).to_contain_text("not registered on this server")
    page.locator("#tc-scopes-1").fill('chat "write')
    expect(page.locator("#e-tc-scopes-1")).to_contain_text("OAuth scope tokens")
    page.locator("#tc-scopes-1").fill("chat:write")
    expect(page.locator("#e-tc-scopes-1")).to_have_count(0)
    both_widths(page, "52-tool-connections")

    page.get_by_role("button", name="Remove the connection slack").click()
    page.locator("#tc-scopes-0").fill("repo read:org")
    page.get_by_test_id("breaking-accept").check()  # a new scope: its callers consent again
    page.get_by_role("button", name="Save", exact=True).click()
    expect(page.get_by_text("Saved as revision 2.")).to_be_visible()
    saved = dev.api("GET", "/api/tools/acts_for_you").json()["connections"]
    assert saved == [{"provider": AHEAD, "scopes": ["repo", "read:org"]}]
    expect(page.locator("#tc-scopes-0")).to_have_value("repo read:org")
