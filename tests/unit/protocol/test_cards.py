"""Server cards, the AI Catalog and registry entries, as documents (`kiln.protocol.cards`).

Each document is checked against Kiln's schema for it (`kiln.protocol.card_schemas`, sources in
`functions/kiln/protocol/schemas/README.md`), and against an official schema file too when
KILN_CARD_SCHEMA_FILE / KILN_REGISTRY_SCHEMA_FILE name one; over HTTP they are
`tests/functional/api/test_server_cards.py` and `tests/e2e/test_lambda_server_cards.py`.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from kiln.protocol.card_paths import is_public_document
from kiln.protocol.card_schemas import CARD_SCHEMA_URL, REGISTRY_SCHEMA_URL
from kiln.protocol.cards import (
    CardError,
    Deployment,
    Endpoint,
    card,
    catalog,
    namespace,
    registry_entry,
    validate,
)
from kiln.settings import LocalSettings

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


@pytest.mark.parametrize("endpoint", [PUBLIC, KEYED], ids=["public", "view"])
@pytest.mark.parametrize("oauth", [False, True], ids=["keys", "oauth"])
def test_a_card_is_valid_against_the_extensions_schema(endpoint: Endpoint, oauth: bool) -> None:
    deployment = Deployment(**{**DEPLOYMENT.__dict__, "oauth": oauth})
    document = card(deployment, endpoint)
    validate(document, "card")
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
    validate(document, "card")
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
    validate(entry, "registry")
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
        validate(broken, "card")


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


def _without(document: dict[str, Any], *path: str | int) -> dict[str, Any]:
    broken = copy.deepcopy(document)
    holder: Any = broken
    for step in path[:-1]:
        holder = holder[step]
    del holder[path[-1]]
    return broken


def _with(document: dict[str, Any], value: Any, *path: str | int) -> dict[str, Any]:
    broken = copy.deepcopy(document)
    holder: Any = broken
    for step in path[:-1]:
        holder = holder[step]
    holder[path[-1]] = value
    return broken


KEYED_CARD = card(DEPLOYMENT, KEYED)
WRONG_CARDS = [
    (_without(KEYED_CARD, "name"), r"\(document\): 'name' is a required property"),
    (_without(KEYED_CARD, "version"), r"\(document\): 'version' is a required property"),
    (_without(KEYED_CARD, "$schema"), r"\(document\): '\$schema' is a required property"),
    (_with(KEYED_CARD, "finance", "name"), r"name: 'finance' does not match"),
    (_with(KEYED_CARD, "com.example/" + "x" * 200, "name"), r"name: .* is too long"),
    (_with(KEYED_CARD, "d" * 101, "description"), r"description: .* is too long"),
    (_with(KEYED_CARD, "", "title"), r"title: .* (is too short|should be non-empty)"),
    (_with(KEYED_CARD, 2, "version"), r"version: 2 is not of type 'string'"),
    (_with(KEYED_CARD, "https://example.com/card.json", "$schema"), r"\$schema: .* was expected"),
    (_without(KEYED_CARD, "remotes", 0, "url"), r"remotes.0: 'url' is a required property"),
    (_without(KEYED_CARD, "remotes", 0, "type"), r"remotes.0: 'type' is a required property"),
    (_with(KEYED_CARD, "stdio", "remotes", 0, "type"), r"remotes.0.type: 'stdio' is not one of"),
    (_with(KEYED_CARD, "ftp://x", "remotes", 0, "url"), r"remotes.0.url: 'ftp://x' does not match"),
    (_without(KEYED_CARD, "remotes", 0, "headers", 0, "name"),
     r"remotes.0.headers.0: 'name' is a required property"),
    (_with(KEYED_CARD, "yes", "remotes", 0, "headers", 0, "isSecret"),
     r"remotes.0.headers.0.isSecret: 'yes' is not of type 'boolean'"),
    (_with(KEYED_CARD, {"url": "https://x"}, "repository"),
     r"repository: 'source' is a required property"),
]  # fmt: skip


ENTRY = registry_entry(KEYED_CARD, name="io.github.acme/finance", version="1.2.0")
WRONG_ENTRIES = [
    (_without(ENTRY, "description"), r"\(document\): 'description' is a required property"),
    (_with(ENTRY, "io.github.acme", "name"), r"name: 'io.github.acme' does not match"),
    (_with(ENTRY, "v" * 256, "version"), r"version: .* is too long"),
    (_without(ENTRY, "remotes", 0, "url"), r"remotes.0: 'url' is a required property"),
    # a card's remote may start with a {variable}; the registry's must be http(s)
    (_with(ENTRY, "{base}/mcp", "remotes", 0, "url"), r"remotes.0.url: '{base}/mcp' does not"),
    (_with(ENTRY, [{"registryType": "npm"}], "packages"),
     r"packages.0: 'identifier' is a required property"),
]  # fmt: skip


WRONG = [("card", *wrong) for wrong in WRONG_CARDS] + [
    ("registry", *wrong) for wrong in WRONG_ENTRIES
]


@pytest.mark.parametrize(("kind", "broken", "said"), WRONG, ids=[f"{k}: {s}" for k, _, s in WRONG])
def test_kilns_schemas_refuse_what_the_specifications_refuse(
    kind: Any, broken: dict[str, Any], said: str
) -> None:
    """A card missing its name, a bad name, a remote without a url, a wrong $schema, ..."""
    with pytest.raises(CardError, match=said + rf".*\(schema: Kiln's {kind}\)"):
        validate(broken, kind)


def test_a_card_url_may_start_with_a_variable_but_a_registry_url_may_not() -> None:
    validate(_with(KEYED_CARD, "{base}/mcp", "remotes", 0, "url"), "card")


def test_an_official_schema_file_is_checked_as_well(tmp_path: Path) -> None:
    # a stand-in "official" file, stricter than Kiln's: the entry passes Kiln's, not this one
    stricter = tmp_path / "server.schema.json"
    stricter.write_text(json.dumps({"type": "object", "required": ["packages"]}))
    with pytest.raises(CardError, match=f"'packages' is a required property .*official {stricter}"):
        registry_entry(
            KEYED_CARD, name="io.github.acme/finance", version="1.0.0", official=stricter
        )
    bundle = tmp_path / "server-card.schema.json"  # a $defs bundle: the card is ServerCard
    bundle.write_text(json.dumps({"$defs": {"ServerCard": {"required": ["icons"]}}}))
    with pytest.raises(CardError, match="'icons' is a required property"):
        validate(KEYED_CARD, "card", official=bundle)
    (tmp_path / "broken.json").write_text("{not json")
    with pytest.raises(CardError, match=r"broken\.json: cannot be read as JSON"):
        validate(KEYED_CARD, "card", official=tmp_path / "broken.json")


LOCAL = LocalSettings.from_env()
OFFICIAL = [
    ("KILN_CARD_SCHEMA_FILE", LOCAL.card_schema_file, "card", KEYED_CARD),
    ("KILN_REGISTRY_SCHEMA_FILE", LOCAL.registry_schema_file, "registry", ENTRY),
]


@pytest.mark.parametrize(
    ("variable", "file", "kind", "document"), OFFICIAL, ids=["card", "registry"]
)
def test_documents_pass_the_official_schema_files_when_given(
    variable: str, file: Path | None, kind: Any, document: dict[str, Any]
) -> None:
    if file is None:
        pytest.skip(f"{variable} is not set: no official schema file to check against "
                    "(the published files are not kept in the repository)")  # fmt: skip
    assert file.is_file(), f"{variable}={file}: no such file"
    validate(document, kind, official=file)
    for endpoint in (PUBLIC, KEYED):
        for oauth in (False, True):
            deployment = Deployment(**{**DEPLOYMENT.__dict__, "oauth": oauth})
            made = card(deployment, endpoint)
            if kind == "registry":
                made = registry_entry(made, name="io.github.acme/x", version="1.0.0")
            validate(made, kind, official=file)
