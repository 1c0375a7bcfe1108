"""Kiln as an OAuth 2.1 client of a provider: PKCE, the authorization URL, the code exchange,
refresh and revocation (RFC 6749, 7636, 7009; metadata by RFC 8414 / OpenID Discovery).

Plain HTTP through the standard library (the runtime has no HTTP client of its own to carry);
every answer is read as JSON with a deadline, and a provider's error becomes `OAuthError`
naming the provider's `error` code, never the request's secrets.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

TIMEOUT_S = 10.0
MAX_ANSWER_BYTES = 256 * 1024


class OAuthError(Exception):
    """The provider refused, or did not answer as OAuth says; the message is safe to show."""

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Tokens:
    access_token: str
    refresh_token: str | None
    expires_at: float | None  # epoch seconds, None: the provider did not say
    scopes: tuple[str, ...]


def pkce_pair() -> tuple[str, str]:
    """(code_verifier, S256 code_challenge)."""
    verifier = secrets.token_urlsafe(48)
    return verifier, s256(verifier)


def s256(verifier: str) -> str:
    """The S256 code_challenge of a PKCE verifier."""
    digest = hashlib.sha256(verifier.encode()).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def authorize_url(
    endpoint: str,
    *,
    client_id: str,
    redirect_uri: str,
    scopes: tuple[str, ...],
    state: str,
    challenge: str,
) -> str:
    query = {
        "response_type": "code",
        "client_id": client_id,
        "redirect_uri": redirect_uri,
        "scope": " ".join(scopes),
        "state": state,
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        "prompt": "consent",
    }
    joiner = "&" if urllib.parse.urlsplit(endpoint).query else "?"
    return endpoint + joiner + urllib.parse.urlencode(query)


def post_form(url: str, form: Mapping[str, str], *, what: str) -> dict[str, Any]:
    """POST a form, the JSON object answered; OAuthError on an OAuth error or a non-JSON answer."""
    data = urllib.parse.urlencode(dict(form)).encode()
    request = urllib.request.Request(  # noqa: S310 (check_url admits only http(s))
        url,
        data=data,
        method="POST",
        headers={"Content-Type": "application/x-www-form-urlencoded", "Accept": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as answer:  # noqa: S310
            raw = answer.read(MAX_ANSWER_BYTES)
    except urllib.error.HTTPError as error:
        raw = error.read(MAX_ANSWER_BYTES)
        found = _json(raw)
        code = str(found.get("error")) if found.get("error") else f"HTTP {error.code}"
        raise OAuthError(f"{what}: the provider answered {code}", code=code) from None
    except (urllib.error.URLError, TimeoutError, OSError) as error:
        raise OAuthError(
            f"{what}: the provider could not be reached ({type(error).__name__})"
        ) from None
    return _json(raw)


def _json(raw: bytes) -> dict[str, Any]:
    try:
        found = json.loads(raw or b"{}")
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}


def tokens_from(
    answer: Mapping[str, Any], *, now: float, asked: tuple[str, ...], what: str
) -> Tokens:
    access = answer.get("access_token")
    if not isinstance(access, str) or not access:
        raise OAuthError(f"{what}: the provider's answer has no access_token")
    expires_in = answer.get("expires_in")
    expires_at = now + float(expires_in) if isinstance(expires_in, (int, float)) else None
    scope = answer.get("scope")
    scopes = tuple(scope.split()) if isinstance(scope, str) and scope else asked
    refresh = answer.get("refresh_token")
    return Tokens(
        access, refresh if isinstance(refresh, str) and refresh else None, expires_at, scopes
    )


def discover(issuer: str) -> dict[str, Any]:
    """The provider's metadata: RFC 8414 first, then OpenID Discovery."""
    base = issuer.rstrip("/")
    for path in ("/.well-known/oauth-authorization-server", "/.well-known/openid-configuration"):
        try:
            with urllib.request.urlopen(base + path, timeout=TIMEOUT_S) as answer:  # noqa: S310
                found = _json(answer.read(MAX_ANSWER_BYTES))
        except (urllib.error.URLError, TimeoutError, OSError):
            continue
        if found.get("authorization_endpoint") and found.get("token_endpoint"):
            if found.get("issuer") not in (issuer, base):
                raise OAuthError(
                    f"{issuer}: its metadata names another issuer ({found.get('issuer')})"
                )
            return found
    raise OAuthError(f"{issuer}: no OAuth or OpenID metadata with both endpoints")
