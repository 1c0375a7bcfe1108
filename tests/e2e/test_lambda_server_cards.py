"""Server cards and the AI Catalog from the public `mcp` handler on the Lambda profile, read by
a real HTTP client (httpx) through an HTTP API stand-in (`gateway.py`) that turns each request
into a payload 2.0 event. The same documents on `kiln dev`: tests/functional/api.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from e2e.gateway import gateway
from e2e.lambda_profile import Environment
from functional.api.test_server_cards import CARD_TYPE, checked_card
from kiln.access.pins import CatalogBinder
from kiln.access.view_store import ViewStore
from kiln.access.views import check_view
from kiln.catalog.rules import check_draft
from kiln.catalog.store import CatalogStore
from kiln.protocol.cards import registry_entry, validate
from support.aws import fresh_stack

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the profile's sandbox needs root")


@pytest.fixture(scope="module")
def http(moto_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    """httpx on the gateway in front of one sandboxed `mcp` function."""
    aws = fresh_stack(moto_endpoint, "kiln-cards")
    store = CatalogStore(aws.clients.dynamodb, aws.clients.s3, table=aws.table, bucket=aws.bucket)
    echo = {"name": "echo", "description": "Echoes.", "language": "python", "code": "print(1)\n"}
    store.create(check_draft(echo), actor="e2e")
    views = ViewStore(aws.clients.dynamodb, table=aws.table, binder=CatalogBinder(store))
    for name, body in (
        ("open", {"published": True, "anonymous": True, "description": "Echo, for anyone."}),
        ("keyed", {"published": True}),
        ("hidden", {}),
    ):
        views.put(check_view({"tools": ["echo"], **body}, name=name), expected_revision=None)
    tmp = tmp_path_factory.mktemp("cards")
    tmp.chmod(0o755)
    env = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_ENDPOINT_URL": moto_endpoint,
        "KILN_TABLE": aws.table,
        "KILN_BUCKET": aws.bucket,
        "KILN_PUBLIC_ANONYMOUS": "false",  # /mcp needs a key: its card says so
    }
    function = Environment(tmp / "mcp", "mcp", env, [moto_endpoint])
    try:
        with gateway(function.invoke) as url, httpx.Client(base_url=url, timeout=60) as client:
            yield client
    finally:
        function.close()


def card_at(http: httpx.Client, url: str) -> dict[str, Any]:
    return checked_card(http.get(url, headers={"Accept": CARD_TYPE}))


def test_the_catalog_from_the_handler_lists_valid_cards_of_mcp_and_the_published_views(
    http: httpx.Client,
) -> None:
    response = http.get("/.well-known/ai-catalog.json")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/ai-catalog+json"
    urls = [entry["url"] for entry in response.json()["entries"]]
    base = str(http.base_url).rstrip("/")
    assert urls == [f"{base}/mcp/server-card", f"{base}/mcp/v/keyed/server-card",
                    f"{base}/mcp/v/open/server-card"]  # fmt: skip
    cards = [card_at(http, url) for url in urls]
    assert [c["remotes"][0]["url"] for c in cards] == [
        f"{base}/mcp", f"{base}/mcp/v/keyed", f"{base}/mcp/v/open"
    ]  # fmt: skip
    needs_key = ["headers" in c["remotes"][0] for c in cards]
    assert needs_key == [True, True, False]  # KILN_PUBLIC_ANONYMOUS=false; "open" is anonymous


def test_a_card_from_the_handler_is_revalidated_with_a_304(http: httpx.Client) -> None:
    first = http.get("/mcp/v/open/server-card")
    assert first.status_code == 200, first.text
    etag = first.headers["etag"]
    assert first.headers["cache-control"] == "public, max-age=300"
    assert first.headers["access-control-allow-origin"] == "*"
    again = http.get("/mcp/v/open/server-card", headers={"If-None-Match": etag})
    assert again.status_code == 304, again.text
    assert again.content == b""
    assert again.headers["etag"] == etag


def test_a_registry_entry_made_from_a_handlers_card_is_valid_against_the_registrys_schema(
    http: httpx.Client,
) -> None:
    document = card_at(http, "/mcp/v/keyed/server-card")
    entry = registry_entry(document, name="io.github.acme/keyed", version="1.0.0")
    validate(entry, "registry")
    assert entry["remotes"][0]["headers"][0]["name"] == "Authorization"


def test_the_handler_answers_an_unpublished_views_card_with_a_clear_404(
    http: httpx.Client,
) -> None:
    response = http.get("/mcp/v/hidden/server-card")
    assert response.status_code == 404
    assert response.json()["error"]["message"].startswith("no published view is named 'hidden'")
