"""Server cards, the AI Catalog and registry entries, as documents (`kiln.protocol.cards`).

Each document is checked against the JSON Schema it follows, kept in the repository
(`functions/kiln/protocol/schemas/`, sources in its README); over HTTP they are
`tests/functional/api/test_server_cards.py` and `tests/e2e/test_lambda_server_cards.py`.
"""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from kiln.protocol.cards import (
    CARD_SCHEMA_URL,
    REGISTRY_SCHEMA_URL,
    SCHEMAS,
    CardError,
    Deployment,
    Endpoint,
    card,
    catalog,
    is_public_document,
    namespace,
    registry_entry,
    validate,
)

DEPLOYMENT = Deployment(
    base_url="https://tools.example.com",
    server_name="kiln",
    version="0.1.0",
    title="Kiln",
    description="Small Python and Node scripts served as MCP tools.",
    website_url=None,
    oauth=False,
)
PUBLIC = Endpoint(path="/mcp", view=None, anonymous=True)
KEYED = Endpoint(path="/mcp/v/finance", view="finance", anonymous=False, description="Money.")

# The kept schemas are the published bytes (schemas/README.md says where each came from).
PINNED = {
    "server-card.schema.json": "2c772b51edb367f154771d84ddbae87ddba00a624422c8e46f218a9ac03bf042",
    "server.schema.json": "3fba09590c99f61735d234822279f4223fab9e300c0a81e81c91ab62a4114de0",
}


@pytest.mark.parametrize("file", sorted(PINNED))
def test_the_kept_schemas_are_the_published_ones_byte_for_byte(file: str) -> None:
    assert hashlib.sha256((SCHEMAS / file).read_bytes()).hexdigest() == PINNED[file]


@pytest.mark.parametrize("endpoint", [PUBLIC, KEYED], ids=["public", "view"])
@pytest.mark.parametrize("oauth", [False, True], ids=["keys", "oauth"])
def test_a_card_is_valid_against_the_extensions_schema(endpoint: Endpoint, oauth: bool) -> None:
    deployment = Deployment(**{**DEPLOYMENT.__dict__, "oauth": oauth})
    document = card(deployment, endpoint)
    validate(document, "server-card.schema.json")
    assert document["$schema"] == CARD_SCHEMA_URL
    assert "tools" not in document  # the extension leaves primitives to the protocol's lists
    assert document["_meta"]["kiln/card"]["status"] == "experimental"


def test_a_view_card_names_its_endpoint_and_asks_for_its_credential() -> None:
    document = card(DEPLOYMENT, KEYED)
    assert document["name"] == "com.example.tools/kiln.finance"
    assert document["description"] == "Money."
    (remote,) = document["remotes"]
    assert remote["type"] == "streamable-http"
    assert remote["url"] == "https://tools.example.com/mcp/v/finance"
    assert "2026-07-28" in remote["supportedProtocolVersions"]
    (header,) = remote["headers"]
    assert header["name"] == "Authorization"
    assert header["isSecret"] is True
    assert header["isRequired"] is True


def test_an_anonymous_endpoint_asks_for_no_header_and_oauth_makes_the_key_optional() -> None:
    assert "headers" not in card(DEPLOYMENT, PUBLIC)["remotes"][0]
    oauth = Deployment(**{**DEPLOYMENT.__dict__, "oauth": True})
    (header,) = card(oauth, KEYED)["remotes"][0]["headers"]
    assert header["isRequired"] is False  # a client may sign in instead
    assert card(oauth, KEYED)["_meta"]["kiln/card"]["auth"]["oauth"] is True


def test_a_long_view_description_is_cut_to_the_schemas_100_characters() -> None:
    long = Endpoint(path="/mcp/v/long", view="long", anonymous=True, description="word " * 60)
    document = card(DEPLOYMENT, long)
    validate(document, "server-card.schema.json")
    assert len(document["description"]) == 100
    assert document["description"].endswith("…")


@pytest.mark.parametrize(
    ("base", "expected"),
    [
        ("https://tools.example.com", "com.example.tools"),
        ("http://127.0.0.1:8000", "1.0.0.127"),
        ("http://localhost:8000/", "localhost"),
        ("http://[::1]:8000", "ipv6---1"),
    ],
)
def test_the_namespace_is_the_hosts_labels_reversed(base: str, expected: str) -> None:
    assert namespace(base) == expected


def test_the_catalog_lists_each_card_by_its_url() -> None:
    document = catalog(DEPLOYMENT, [PUBLIC, KEYED])
    assert document["specVersion"] == "1.0"
    assert [(e["identifier"], e["type"], e["url"]) for e in document["entries"]] == [
        ("urn:air:tools.example.com:mcp:kiln", "application/mcp-server-card+json",
         "https://tools.example.com/mcp/server-card"),
        ("urn:air:tools.example.com:mcp:kiln.finance", "application/mcp-server-card+json",
         "https://tools.example.com/mcp/v/finance/server-card"),
    ]  # fmt: skip


def test_a_registry_entry_is_valid_against_the_registrys_schema() -> None:
    entry = registry_entry(card(DEPLOYMENT, KEYED), name="io.github.acme/finance", version="1.2.0")
    validate(entry, "server.schema.json")
    assert entry["$schema"] == REGISTRY_SCHEMA_URL
    (remote,) = entry["remotes"]
    assert remote["url"] == "https://tools.example.com/mcp/v/finance"
    assert remote["headers"][0]["name"] == "Authorization"
    assert "supportedProtocolVersions" not in remote  # not a field of the registry's remotes


@pytest.mark.parametrize("name", ["finance", "a/b/c", "io.github.acme/has space", "x" * 201])
def test_a_name_that_is_not_reverse_dns_is_refused_with_the_rule(name: str) -> None:
    with pytest.raises(CardError, match="reverse-DNS 'namespace/server'"):
        registry_entry(card(DEPLOYMENT, KEYED), name=name, version="1.0.0")


def test_a_document_the_schema_refuses_names_the_field_and_the_rule() -> None:
    broken: dict[str, Any] = {**card(DEPLOYMENT, PUBLIC), "description": ""}
    with pytest.raises(CardError, match=r"description: .* (is too short|should be non-empty)"):
        validate(broken, "server-card.schema.json")


@pytest.mark.parametrize(
    ("path", "public"),
    [
        ("/.well-known/ai-catalog.json", True),
        ("/mcp/server-card", True),
        ("/mcp/v/finance/server-card", True),
        ("/mcp", False),
        ("/mcp/v/finance", False),
        ("/mcp/v/finance/other", False),
        ("/mcp/v/a/b/server-card", False),
        ("/api/views", False),
    ],
)
def test_only_cards_and_the_catalog_are_public_documents(path: str, public: bool) -> None:
    assert is_public_document(path) is public
