"""The Authenticator's decisions that need no key store or issuer."""

from __future__ import annotations

import pytest

from kiln.identity.policy import ANONYMOUS, Authenticator, AuthError

BASE = "https://kiln.example"
META = 'resource_metadata="https://kiln.example/.well-known/oauth-protected-resource/mcp"'


def _refusal(auth: Authenticator, header: str | None, need: str = "call") -> AuthError:
    with pytest.raises(AuthError) as caught:
        auth.authenticate(header, need=need, resource_path="/mcp", base_url=BASE)  # type: ignore[arg-type]
    return caught.value


def test_missing_credential_is_401_with_metadata_and_scope_but_no_error_code() -> None:
    error = _refusal(Authenticator(keys=None), None)
    assert error.status == 401
    assert error.www_authenticate == f'Bearer scope="kiln:call", {META}'


def test_author_routes_ask_for_the_author_scope() -> None:
    error = _refusal(Authenticator(keys=None), None, "author")
    assert 'scope="kiln:author"' in error.www_authenticate


def test_anonymous_is_allowed_for_calls_only_when_configured() -> None:
    auth = Authenticator(keys=None, anonymous_calls=True)
    assert auth.authenticate(None, need="call", resource_path="/mcp", base_url=BASE) is ANONYMOUS
    assert auth.authenticate("", need="call", resource_path="/mcp", base_url=BASE) is ANONYMOUS
    assert _refusal(auth, None, "author").status == 401


def test_other_schemes_are_401_and_empty_bearer_is_400() -> None:
    auth = Authenticator(keys=None)
    basic = _refusal(auth, "Basic YWxpY2U6cHc=")
    assert basic.status == 401
    assert "use the Bearer scheme" in basic.message
    empty = _refusal(auth, "Bearer ")
    assert empty.status == 400
    assert 'error="invalid_request"' in empty.www_authenticate
    spaced = _refusal(auth, "Bearer a b")
    assert spaced.status == 400


def test_a_non_key_token_without_oauth_mode_is_an_invalid_token() -> None:
    error = _refusal(Authenticator(keys=None), "Bearer eyJhbGciOi.x.y")
    assert error.status == 401
    assert 'error="invalid_token"' in error.www_authenticate
    assert "not a Kiln API key" in error.message


def test_static_author_key_is_accepted_in_constant_time_compare() -> None:
    auth = Authenticator(keys=None, static_keys={"local-author-key-0123": ("local", "author")})
    principal = auth.authenticate(
        "Bearer local-author-key-0123", need="author", resource_path="/mcp", base_url=BASE
    )
    assert principal.label == "key:local"
    assert principal.can("call")
    assert _refusal(auth, "Bearer local-author-key-0124").status == 401


def test_error_description_cannot_break_out_of_its_quotes() -> None:
    auth = Authenticator(keys=None)
    challenge = auth.challenge(
        need="call", resource_path="", base_url=BASE, error="invalid_token", description='a"b\\c'
    )
    assert 'error_description="abc"' in challenge
