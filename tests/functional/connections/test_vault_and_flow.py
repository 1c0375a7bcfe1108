"""Connections against a real OAuth provider (`oidc-provider`, started locally): the code +
PKCE flow, refresh, revocation, a denied consent, wrong and replayed states, a replayed code,
the sealed vault read directly, and a record planted under another identity."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from kiln.connections import ConnectError, Connections
from kiln.connections.envelope import FileKeys
from kiln.connections.oauth import OAuthError
from kiln.connections.providers import ProviderStore, provider_from
from kiln.connections.vault import Vault
from support.aws import AwsStack
from support.leakguard import Planted
from support.oidc_provider import OidcProvider, query

REDIRECT = "http://127.0.0.1:9/connect/callback"  # never followed: consent() stops there


class Clock:
    now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def world(aws: AwsStack, ssm: Any, provider: OidcProvider, tmp_path: Path) -> Any:
    class World:
        clock = Clock()
        providers = ProviderStore(
            aws.clients.dynamodb, ssm, table=aws.table, secrets_prefix=f"/{aws.table}"
        )
        vault = Vault(
            aws.clients.dynamodb, FileKeys(tmp_path / "vault.key"), table=aws.table, clock=clock
        )

    client_id, secret = provider.register(REDIRECT)
    got = provider_from(
        "acme", {"issuer": provider.issuer, "client_id": client_id, "scopes": ["openid"]}
    )
    World.providers.put(got, secret)
    World.connections = Connections(World.providers, World.vault, clock=lambda: World.clock.now)
    return World


def connect(world: Any, provider: OidcProvider, identity: str, user: str) -> tuple[Any, httpx.URL]:
    pending = world.connections.begin(identity, "acme", ("repo",), redirect_uri=REDIRECT)
    with httpx.Client() as browser:
        back = provider.consent(browser, world.connections.authorize_url(pending), user=user)
    return pending, back


def finish(world: Any, pending: Any, back: httpx.URL) -> Any:
    answer = query(back)
    return world.connections.finish(
        answer.get("state", ""),
        code=answer.get("code"),
        error=answer.get("error"),
        binding=pending.binding,
    )


def test_two_callers_connect_and_each_gets_their_own_token_and_the_store_has_none_in_clear(
    world: Any, provider: OidcProvider, aws: AwsStack, planted_secrets: Planted
) -> None:
    for identity, user in (("key:k1", "alice"), ("key:k2", "bob")):
        pending, back = connect(world, provider, identity, user)
        assert query(back)["state"] == pending.state
        finish(world, pending, back)
    alice = world.connections.access_token("key:k1", "acme", ("repo",))
    bob = world.connections.access_token("key:k2", "acme", ("repo",))
    assert alice
    assert bob
    assert alice != bob
    planted_secrets.add(alice)
    planted_secrets.add(bob)
    assert provider.whoami(alice)["sub"] == "alice", provider.tail()
    assert provider.whoami(bob)["sub"] == "bob"
    assert "repo" in provider.whoami(alice)["scope"].split()
    assert world.connections.access_token("key:k3", "acme", ("repo",)) is None
    assert world.connections.access_token("key:k1", "acme", ("admin",)) is None  # not granted

    raw = json.dumps(aws.clients.dynamodb.scan(TableName=aws.table)["Items"])
    stored = world.vault.tokens("key:k1", "acme")
    assert stored is not None
    assert stored.refresh_token
    for secret in (alice, bob, stored.refresh_token):
        assert secret not in raw, "a token is in the table in clear"
    listed = [c.public() for c in world.vault.connections()]
    assert [(c["identity"], c["provider"]) for c in listed] == [
        ("key:k1", "acme"),
        ("key:k2", "acme"),
    ]
    assert alice not in json.dumps(listed)


def test_a_record_planted_under_another_identity_is_never_used(
    world: Any, provider: OidcProvider, aws: AwsStack
) -> None:
    finish(world, *connect(world, provider, "key:victim", "alice"))
    item = aws.clients.dynamodb.get_item(
        TableName=aws.table, Key={"pk": {"S": "CONNECTION#key:victim"}, "sk": {"S": "acme"}}
    )["Item"]
    aws.clients.dynamodb.put_item(
        TableName=aws.table, Item={**item, "pk": {"S": "CONNECTION#key:thief"}}
    )
    assert world.vault.tokens("key:thief", "acme") is None
    assert world.connections.access_token("key:thief", "acme", ()) is None
    assert world.connections.access_token("key:victim", "acme", ()) is not None


def test_a_state_is_spent_once_and_a_code_is_used_once(world: Any, provider: OidcProvider) -> None:
    pending, back = connect(world, provider, "key:k1", "alice")
    finish(world, pending, back)
    with pytest.raises(ConnectError, match="already used"):
        finish(world, pending, back)  # the same callback again
    again = world.connections.begin("key:k1", "acme", ("repo",), redirect_uri=REDIRECT)
    with pytest.raises(OAuthError, match="invalid_grant"):  # the code of the first flow
        world.connections.finish(
            again.state, code=query(back)["code"], error=None, binding=again.binding
        )


def test_a_forged_or_wrong_callback_connects_nothing(world: Any, provider: OidcProvider) -> None:
    with pytest.raises(ConnectError, match="unknown, expired or already used state"):
        world.connections.finish("forged-state", code="x", error=None, binding="y")
    pending, back = connect(world, provider, "key:k1", "alice")
    with pytest.raises(ConnectError, match="this browser did not start"):
        world.connections.finish(
            pending.state, code=query(back)["code"], error=None, binding="other"
        )
    assert world.vault.tokens("key:k1", "acme") is None
    pending, back = connect(world, provider, "key:k1", "alice")
    world.clock.now += 601  # the flow's ten minutes are over
    with pytest.raises(ConnectError, match="expired"):
        finish(world, pending, back)


def test_a_denied_consent_connects_nothing(world: Any, provider: OidcProvider) -> None:
    pending = world.connections.begin("key:k1", "acme", ("repo",), redirect_uri=REDIRECT)
    with httpx.Client() as browser:
        back = provider.consent(
            browser, world.connections.authorize_url(pending), user="alice", decision="deny"
        )
    assert query(back)["error"] == "access_denied"
    with pytest.raises(ConnectError, match="the provider said access_denied"):
        finish(world, pending, back)
    assert world.vault.tokens("key:k1", "acme") is None


def test_the_redirect_uri_must_match_exactly(world: Any, provider: OidcProvider) -> None:
    pending = world.connections.begin(
        "key:k1", "acme", ("repo",), redirect_uri=REDIRECT + "/elsewhere"
    )
    with httpx.Client() as browser:
        answer = browser.get(world.connections.authorize_url(pending))
    assert answer.status_code == 400, answer.text[:300]
    assert "redirect_uri" in answer.text, answer.text[:300]


def test_an_expiring_token_is_refreshed_and_a_revoked_one_is_gone(
    world: Any, provider: OidcProvider, planted_secrets: Planted
) -> None:
    finish(world, *connect(world, provider, "key:k1", "alice"))
    first = world.connections.access_token("key:k1", "acme", ("repo",))
    planted_secrets.add(first)
    world.clock.now += 3600  # past the token's hour, by the vault's clock
    second = world.connections.access_token("key:k1", "acme", ("repo",))
    assert second
    assert second != first
    planted_secrets.add(second)
    assert provider.whoami(second)["sub"] == "alice"
    assert world.connections.access_token("key:k1", "acme", ("repo",)) == second  # kept

    assert world.connections.revoke("key:k1", "acme") is True
    assert world.vault.tokens("key:k1", "acme") is None
    assert world.connections.access_token("key:k1", "acme", ("repo",)) is None
    assert provider.whoami(second)["status"] == 401, "the provider still honours the token"
    assert world.connections.revoke("key:k1", "acme") is False


def test_a_refresh_the_provider_refuses_drops_the_connection(
    world: Any, provider: OidcProvider
) -> None:
    finish(world, *connect(world, provider, "key:k1", "alice"))
    stored = world.vault.tokens("key:k1", "acme")
    httpx.post(  # the person revoked Kiln at the provider
        f"{provider.issuer}/token/revocation",
        data={
            "token": stored.refresh_token,
            "client_id": world.providers.get("acme").client_id,
            "client_secret": world.providers.client_secret("acme"),
        },
    ).raise_for_status()
    world.clock.now += 3600
    assert world.connections.access_token("key:k1", "acme", ("repo",)) is None
    assert world.vault.tokens("key:k1", "acme") is None, "a dead refresh token was kept"
