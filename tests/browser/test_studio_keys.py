"""Keys and secrets in the studio: a key shown once, a read-only studio with it, revoked; a
secret set write-only that the tool then reads."""

from __future__ import annotations

import re
from typing import Any

from playwright.sync_api import expect

from support.browser import Dev, assert_accessible, shoot, sign_in


def test_author_creates_a_key_signs_in_read_only_with_it_and_revokes_it(
    browser: Any, page: Any, dev: Dev
) -> None:
    sign_in(page)
    page.get_by_role("link", name="Keys", exact=True).click()
    page.get_by_label("Name").fill("laptop")
    page.get_by_label("Scope").select_option("call")
    page.get_by_role("button", name="Create key").click()
    fresh = page.get_by_test_id("new-key")
    expect(fresh).to_contain_text("will not be shown again")
    key = fresh.locator("code").inner_text()
    assert key.startswith("kiln_")
    expect(page.get_by_role("cell", name="laptop")).to_be_visible()
    shoot(page, "10-keys")
    assert_accessible(page)

    reader = browser.new_context(base_url=dev.url)
    other = reader.new_page()
    sign_in(other, key)
    expect(other.get_by_text("read-only")).to_be_visible()
    expect(other.get_by_role("link", name="New tool")).to_have_count(0)
    expect(other.get_by_role("link", name="Keys", exact=True)).to_have_count(0)

    # Other tests' keys may be listed too (one kiln dev for the folder): this key's row.
    page.get_by_role("row", name=re.compile("laptop")).get_by_role("button", name="Revoke…").click()
    page.get_by_role("button", name="Revoke laptop").click()
    expect(page.get_by_text("laptop revoked.")).to_be_visible()
    expect(page.get_by_role("cell", name="laptop")).to_have_count(0)
    other.reload()  # the revoked key's studio signs itself out
    expect(other.get_by_label("API key")).to_be_visible()
    reader.close()
    assert (
        dev.http.get(
            dev.url + "/api/whoami", headers={"Authorization": f"Bearer {key}"}
        ).status_code
        == 401
    )


def test_author_sets_a_secret_that_the_tool_then_reads(page: Any, dev: Dev) -> None:
    code = "import os\nprint('token ends', os.environ['SERVICE_TOKEN'][-4:])\n"
    body = {"name": "secretive", "description": "Reads a secret.", "language": "python"}
    body |= {"code": code, "secrets": ["SERVICE_TOKEN"]}
    assert dev.api("POST", "/api/tools", json=body).status_code == 201
    sign_in(page)
    page.goto("/studio/#/tools/secretive/secrets")
    expect(page.get_by_test_id("secret-state")).to_have_text("not set")
    page.get_by_label("Value for SERVICE_TOKEN").fill("s3cr3t-value-9876")
    page.get_by_role("button", name="Set").click()
    expect(page.get_by_test_id("secret-state")).to_have_text("set")
    assert "s3cr3t-value-9876" not in page.content()  # write-only: never shown back
    shoot(page, "11-secrets")
    assert_accessible(page)
    page.get_by_role("link", name="Test").click()
    page.get_by_role("button", name="Run", exact=True).click()
    expect(page.get_by_test_id("stdout")).to_have_text("token ends 9876")
