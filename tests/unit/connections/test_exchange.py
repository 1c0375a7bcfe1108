"""The RFC 8693 exchange's request and how its answer is kept (kiln.connections.exchange)."""

from __future__ import annotations

import time

import jwt
import pytest

from kiln.connections.exchange import (
    ACCESS_TOKEN_TYPE,
    GRANT,
    exchange_form,
    exchanged_tokens,
    subject_expiry,
)
from kiln.connections.oauth import OAuthError
from kiln.identity.policy import Principal

NOW = 1_900_000_000.0


def subject(exp: float | None) -> str:
    claims = {"sub": "alice", **({"exp": int(exp)} if exp is not None else {})}
    return jwt.encode(claims, "not-checked-here-but-long-enough-for-hs256", algorithm="HS256")


def test_the_form_sends_the_callers_token_as_an_access_token_subject() -> None:
    form = exchange_form("tok", ("openid", "repo"), "https://api.example")
    assert form == {
        "grant_type": GRANT,
        "subject_token": "tok",
        "subject_token_type": ACCESS_TOKEN_TYPE,
        "requested_token_type": ACCESS_TOKEN_TYPE,
        "scope": "openid repo",
        "audience": "https://api.example",
    }
    assert "audience" not in exchange_form("tok", (), None)
    assert "scope" not in exchange_form("tok", (), None)


def test_an_exchanged_token_is_kept_without_refresh_and_no_longer_than_the_callers() -> None:
    answer = {"access_token": "a", "refresh_token": "r", "expires_in": 3600,
              "issued_token_type": ACCESS_TOKEN_TYPE, "scope": "repo"}  # fmt: skip
    kept = exchanged_tokens(answer, now=NOW, asked=("repo",), what="x", subject=subject(NOW + 60))
    assert (kept.access_token, kept.refresh_token, kept.scopes) == ("a", None, ("repo",))
    assert kept.expires_at == NOW + 60
    longer = exchanged_tokens(answer, now=NOW, asked=(), what="x", subject=subject(NOW + 9999))
    assert longer.expires_at == NOW + 3600
    opaque = exchanged_tokens(answer, now=NOW, asked=(), what="x", subject="not-a-jwt")
    assert opaque.expires_at == NOW + 3600


def test_a_token_that_is_not_an_access_token_is_refused_naming_its_type() -> None:
    answer = {"access_token": "a", "issued_token_type": "urn:ietf:params:oauth:token-type:id_token"}
    with pytest.raises(OAuthError, match="issued a urn:ietf:params:oauth:token-type:id_token"):
        exchanged_tokens(answer, now=NOW, asked=(), what="x", subject=subject(None))


def test_the_subject_expiry_is_read_from_the_callers_own_token() -> None:
    assert subject_expiry(subject(time.time() + 100)) is not None
    assert subject_expiry(subject(None)) is None
    assert subject_expiry("kiln_not_a_jwt") is None


def test_a_principal_never_shows_its_bearer_token() -> None:
    who = Principal("jwt", "alice", frozenset({"call"}), bearer="the-callers-own-token")
    assert "the-callers-own-token" not in repr(who)
    assert who == Principal("jwt", "alice", frozenset({"call"}))
