"""OAuth resource-server mode: real RS256 tokens checked against a JWKS served over HTTP."""

from __future__ import annotations

from collections.abc import Iterator

import jwt
import pytest

from kiln.identity.tokens import JwtVerifier, ScopeNames, TokenError
from support.auth import Issuer, new_rsa_key, running_issuer

AUD = "https://kiln.example/mcp"


@pytest.fixture(scope="module")
def issuer() -> Iterator[Issuer]:
    with running_issuer() as running:
        yield running


@pytest.fixture
def verifier(issuer: Issuer) -> JwtVerifier:
    return JwtVerifier(issuer=issuer.url, jwks_url=issuer.jwks_url)


def test_call_scope_grants_call_only(issuer: Issuer, verifier: JwtVerifier) -> None:
    verified = verifier.verify(issuer.token(aud=AUD, scope="kiln:call"), audiences=[AUD])
    assert verified.permissions == {"call"}
    assert verified.subject == "alice"


def test_author_scope_implies_call(issuer: Issuer, verifier: JwtVerifier) -> None:
    token = issuer.token(aud=AUD, scope="openid kiln:author")
    assert verifier.verify(token, audiences=[AUD]).permissions == {"author", "call"}


def test_scp_claim_as_a_list_is_read_too(issuer: Issuer, verifier: JwtVerifier) -> None:
    token = issuer.token(aud=AUD, scope=None, extra={"scp": ["kiln:call"]})
    assert verifier.verify(token, audiences=[AUD]).permissions == {"call"}


def test_token_without_kiln_scopes_verifies_with_no_permissions(
    issuer: Issuer, verifier: JwtVerifier
) -> None:
    token = issuer.token(aud=AUD, scope="email profile")
    verified = verifier.verify(token, audiences=[AUD])
    assert verified.permissions == frozenset()
    assert verified.granted == {"email", "profile"}


def test_configured_scope_names_replace_the_defaults(issuer: Issuer) -> None:
    verifier = JwtVerifier(
        issuer=issuer.url, jwks_url=issuer.jwks_url, scopes=ScopeNames("tools.run", "tools.admin")
    )
    assert verifier.verify(
        issuer.token(aud=AUD, scope="tools.admin"), audiences=[AUD]
    ).permissions == {"author", "call"}
    assert not verifier.verify(
        issuer.token(aud=AUD, scope="kiln:author"), audiences=[AUD]
    ).permissions


def test_audience_list_in_token_matches_if_any_entry_is_ours(
    issuer: Issuer, verifier: JwtVerifier
) -> None:
    token = issuer.token(aud=["https://other.example", AUD])
    assert verifier.verify(token, audiences=[AUD]).permissions == {"call"}


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({"aud": "https://other.example/mcp"}, "audience"),
        ({"aud": AUD, "expires_in": -120}, "expired"),
        ({"aud": AUD, "iss": "https://evil.example"}, "another issuer"),
        ({"aud": None}, "'aud' claim"),
    ],
    ids=["wrong-audience", "expired", "wrong-issuer", "no-audience"],
)
def test_bad_claims_are_refused_with_the_reason(
    issuer: Issuer, verifier: JwtVerifier, kwargs: dict[str, object], reason: str
) -> None:
    token = issuer.token(**kwargs)  # type: ignore[arg-type]
    with pytest.raises(TokenError, match=reason) as caught:
        verifier.verify(token, audiences=[AUD])
    assert token not in str(caught.value)


def test_token_signed_by_another_key_under_our_kid_is_refused(
    issuer: Issuer, verifier: JwtVerifier
) -> None:
    forged = issuer.token(aud=AUD, key=new_rsa_key())
    with pytest.raises(TokenError, match="signature"):
        verifier.verify(forged, audiences=[AUD])


def test_token_with_an_unknown_kid_is_refused(issuer: Issuer, verifier: JwtVerifier) -> None:
    with pytest.raises(TokenError, match="not signed by a key of the configured issuer"):
        verifier.verify(issuer.token(aud=AUD, kid="nope"), audiences=[AUD])


def test_symmetric_and_unsigned_tokens_are_refused(verifier: JwtVerifier, issuer: Issuer) -> None:
    claims = {"iss": issuer.url, "aud": AUD, "exp": 2_000_000_000, "scope": "kiln:author"}
    hs = jwt.encode(claims, "a-shared-secret-of-at-least-32-bytes!!", algorithm="HS256")
    unsigned = jwt.encode(claims, None, algorithm="none")
    for token in (hs, unsigned):
        with pytest.raises(TokenError, match="algorithm is not accepted"):
            verifier.verify(token, audiences=[AUD])


def test_garbage_is_not_a_jwt(verifier: JwtVerifier) -> None:
    with pytest.raises(TokenError, match="not a well-formed JWT"):
        verifier.verify("not.a.jwt", audiences=[AUD])


def test_jwks_url_is_discovered_from_the_issuer_metadata(issuer: Issuer) -> None:
    verifier = JwtVerifier(issuer=issuer.url)
    assert verifier.verify(issuer.token(aud=AUD), audiences=[AUD]).permissions == {"call"}
    assert "/.well-known/oauth-authorization-server" in issuer.requests


def test_unreachable_jwks_is_a_token_error_not_a_crash(issuer: Issuer) -> None:
    verifier = JwtVerifier(issuer=issuer.url, jwks_url="http://127.0.0.1:9/jwks.json")
    with pytest.raises(TokenError, match="could not be fetched"):
        verifier.verify(issuer.token(aud=AUD), audiences=[AUD])
