"""Providers an operator registers: endpoints given or read from the issuer's metadata, the
client secret in SSM as a SecureString, bad input refused saying which rule."""

from __future__ import annotations

from typing import Any

import pytest

from kiln.connections.oauth import OAuthError
from kiln.connections.providers import (
    ProviderError,
    ProviderNotFoundError,
    ProviderStore,
    provider_from,
)
from support.aws import AwsStack
from support.oidc_provider import OidcProvider


def test_a_provider_from_its_issuer_metadata_and_its_secret_in_ssm(
    provider: OidcProvider, aws: AwsStack, ssm: Any
) -> None:
    store = ProviderStore(
        aws.clients.dynamodb, ssm, table=aws.table, secrets_prefix=f"/{aws.table}"
    )
    found = provider_from(
        "acme", {"issuer": provider.issuer, "client_id": "c1", "scopes": ["repo"]}
    )
    assert found.authorize_url == f"{provider.issuer}/auth"
    assert found.token_url == f"{provider.issuer}/token"
    assert found.revoke_url == f"{provider.issuer}/token/revocation"
    store.put(found, "the-client-secret")
    assert store.get("acme") == found
    exchanging = provider_from(
        "corp",
        {"issuer": provider.issuer, "client_id": "c2", "token_exchange": True,
         "exchange_audience": "https://api.example"},
    )  # fmt: skip
    store.put(exchanging, None)
    assert store.get("corp") == exchanging
    assert store.get("corp").public()["token_exchange"] is True
    assert store.get("acme").token_exchange is False
    store.delete("corp")
    assert [p.name for p in store.list()] == ["acme"]
    assert "the-client-secret" not in repr(store.get("acme").public())
    parameter = ssm.get_parameter(Name=f"/{aws.table}/_connections/acme/client_secret")["Parameter"]
    assert parameter["Type"] == "SecureString"
    assert store.client_secret("acme") == "the-client-secret"
    store.delete("acme")
    assert store.client_secret("acme") is None
    with pytest.raises(ProviderNotFoundError, match="no connection provider named 'acme'"):
        store.get("acme")


@pytest.mark.parametrize(
    ("name", "body", "said", "field"),
    [
        ("GitHub", {}, "provider name must be 1-32 characters", "name"),
        (
            "gh",
            {"token_url": "https://x/t", "client_id": "c"},
            "authorize_url is required",
            "authorize_url",
        ),
        (
            "gh",
            {"authorize_url": "http://example.com/a", "token_url": "https://x/t", "client_id": "c"},
            "authorize_url must be an https URL",
            "authorize_url",
        ),
        (
            "gh",
            {"authorize_url": "https://x/a", "token_url": "https://x/t"},
            "client_id is required",
            "client_id",
        ),
        (
            "gh",
            {
                "authorize_url": "https://x/a",
                "token_url": "https://x/t",
                "client_id": "c",
                "scopes": ["a b"],
            },
            "'a b' is not an OAuth scope token",
            "scopes",
        ),
        (
            "gh",
            {
                "authorize_url": "https://x/a",
                "token_url": "https://x/t",
                "client_id": "c",
                "scope": "repo",
            },
            "unknown field(s): scope",
            "",
        ),
        (
            "gh",
            {
                "authorize_url": "https://x/a",
                "token_url": "https://x/t",
                "client_id": "c",
                "token_exchange": "yes",
            },
            "token_exchange must be true or false",
            "token_exchange",
        ),
        (
            "gh",
            {
                "authorize_url": "https://x/a",
                "token_url": "https://x/t",
                "client_id": "c",
                "exchange_audience": "https://api",
            },
            "exchange_audience is only used with token_exchange: true",
            "exchange_audience",
        ),
        (
            "gh",
            {
                "authorize_url": "https://x/a",
                "token_url": "https://x/t",
                "client_id": "c",
                "token_exchange": True,
                "exchange_audience": "a\nb",
            },
            "exchange_audience must be a string of 1-256 printable characters",
            "exchange_audience",
        ),
    ],
)
def test_bad_provider_input_is_refused_saying_why_and_naming_the_field(
    name: str, body: dict[str, Any], said: str, field: str
) -> None:
    with pytest.raises(ProviderError) as refused:
        provider_from(name, body)
    assert said in str(refused.value)
    assert refused.value.field == field  # the studio shows it at that field


def test_an_issuer_without_metadata_is_refused(provider: OidcProvider) -> None:
    with pytest.raises(OAuthError, match="no OAuth or OpenID metadata"):
        provider_from("gh", {"issuer": provider.issuer + "/nothing-here", "client_id": "c"})
