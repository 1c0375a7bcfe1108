"""The Authenticator with real keys (DynamoDB on moto) and real JWTs (JWKS over HTTP)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from conftest import AwsStack
from kiln.identity.keys import KeyStore
from kiln.identity.policy import Authenticator, AuthError, Principal
from kiln.identity.tokens import JwtVerifier
from support.auth import Issuer, running_issuer

BASE = "https://kiln.example"
META_MCP = f'resource_metadata="{BASE}/.well-known/oauth-protected-resource/mcp"'


@pytest.fixture(scope="module")
def issuer() -> Iterator[Issuer]:
    with running_issuer() as running:
        yield running


@pytest.fixture
def keys(aws: AwsStack) -> KeyStore:
    return KeyStore(aws.clients.dynamodb, table=aws.table)


@pytest.fixture
def auth(keys: KeyStore, issuer: Issuer) -> Authenticator:
    return Authenticator(
        keys=keys,
        verifier=JwtVerifier(issuer=issuer.url, jwks_url=issuer.jwks_url),
        public_url=BASE,
    )


def _check(
    auth: Authenticator, header: str | None, need: str = "call", path: str = "/mcp"
) -> Principal:
    return auth.authenticate(header, need=need, resource_path=path, base_url=BASE)  # type: ignore[arg-type]


def test_call_key_may_call_but_not_author(auth: Authenticator, keys: KeyStore) -> None:
    _, secret = keys.create("caller", "call")
    principal = _check(auth, f"Bearer {secret}")
    assert (principal.kind, principal.name, principal.label) == ("key", "caller", "key:caller")
    with pytest.raises(AuthError) as caught:
        _check(auth, f"Bearer {secret}", "author", "/admin/mcp")
    assert caught.value.status == 403
    challenge = caught.value.www_authenticate
    assert challenge.startswith('Bearer error="insufficient_scope"')
    assert 'scope="kiln:author"' in challenge
    assert (
        'resource_metadata="https://kiln.example/.well-known/oauth-protected-resource/admin/mcp"'
        in challenge
    )


def test_author_key_may_author_and_call(auth: Authenticator, keys: KeyStore) -> None:
    _, secret = keys.create("writer", "author")
    assert _check(auth, f"Bearer {secret}", "author", "/admin/mcp").scopes == {"author", "call"}
    assert _check(auth, f"bearer {secret}").name == "writer"


def test_revoked_key_is_401_invalid_token(auth: Authenticator, keys: KeyStore) -> None:
    _, secret = keys.create("gone", "author")
    keys.revoke("gone")
    with pytest.raises(AuthError) as caught:
        _check(auth, f"Bearer {secret}")
    assert caught.value.status == 401
    assert 'error="invalid_token"' in caught.value.www_authenticate
    assert META_MCP in caught.value.www_authenticate
    assert secret not in caught.value.www_authenticate + caught.value.message


def test_jwt_for_this_resource_is_accepted(auth: Authenticator, issuer: Issuer) -> None:
    token = issuer.token(aud=f"{BASE}/mcp", scope="kiln:call", sub="bob")
    principal = _check(auth, f"Bearer {token}")
    assert (principal.kind, principal.label) == ("jwt", "jwt:bob")


def test_jwt_for_the_server_root_is_accepted_on_every_resource(
    auth: Authenticator, issuer: Issuer
) -> None:
    token = issuer.token(aud=BASE, scope="kiln:author")
    assert _check(auth, f"Bearer {token}", "author", "/admin/mcp").can("author")
    assert _check(auth, f"Bearer {token}", "author", "").can("author")


def test_jwt_for_mcp_is_not_accepted_on_admin(auth: Authenticator, issuer: Issuer) -> None:
    token = issuer.token(aud=f"{BASE}/mcp", scope="kiln:author")
    with pytest.raises(AuthError, match="audience") as caught:
        _check(auth, f"Bearer {token}", "author", "/admin/mcp")
    assert caught.value.status == 401


def test_expired_and_wrong_audience_jwts_are_401(auth: Authenticator, issuer: Issuer) -> None:
    for token, reason in [
        (issuer.token(aud=f"{BASE}/mcp", expires_in=-300), "the token has expired"),
        (issuer.token(aud="https://elsewhere.example/mcp"), "the token was issued for another"),
    ]:
        with pytest.raises(AuthError) as caught:
            _check(auth, f"Bearer {token}")
        assert caught.value.status == 401
        assert f'error_description="{reason}' in caught.value.www_authenticate


def test_jwt_without_the_scope_is_403_naming_the_scope(auth: Authenticator, issuer: Issuer) -> None:
    token = issuer.token(aud=f"{BASE}/mcp", scope="email")
    with pytest.raises(AuthError) as caught:
        _check(auth, f"Bearer {token}")
    assert caught.value.status == 403
    assert caught.value.www_authenticate == (
        'Bearer error="insufficient_scope", error_description="this needs the kiln:call scope", '
        f'scope="kiln:call", {META_MCP}'
    )


def test_configured_audience_is_accepted(keys: KeyStore, issuer: Issuer) -> None:
    auth = Authenticator(
        keys=keys,
        verifier=JwtVerifier(issuer=issuer.url, jwks_url=issuer.jwks_url),
        audiences=["api://kiln"],
    )
    assert _check(auth, f"Bearer {issuer.token(aud='api://kiln')}").kind == "jwt"


def test_bad_credential_is_401_even_when_anonymous_is_allowed(keys: KeyStore) -> None:
    auth = Authenticator(keys=keys, anonymous_calls=True)
    assert _check(auth, None).kind == "anonymous"
    with pytest.raises(AuthError) as caught:
        _check(auth, "Bearer kiln_call_" + "A" * 43)
    assert caught.value.status == 401


def test_audience_never_comes_from_the_request_url(keys: KeyStore, issuer: Issuer) -> None:
    auth = Authenticator(
        keys=keys,
        verifier=JwtVerifier(issuer=issuer.url, jwks_url=issuer.jwks_url),
        audiences=["api://kiln"],
    )
    token = issuer.token(aud=f"{BASE}/mcp")  # BASE is only what the request claims to be
    with pytest.raises(AuthError, match="audience"):
        _check(auth, f"Bearer {token}")
