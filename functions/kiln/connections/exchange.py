"""On behalf of, without a consent screen: OAuth 2.0 Token Exchange (RFC 8693).

Where callers sign in with OAuth (Kiln's resource-server mode) and a provider trusts the same
identity provider, an operator registers the provider with `token_exchange`. A call from an
OAuth caller then gets the provider's token by exchanging the caller's own bearer token at the
provider's token endpoint, with the client's own authentication as for the code exchange,
instead of sending the person to a consent page. Key callers (no token of an IdP to exchange)
connect as for any provider.

The exchanged token is kept in the vault like a connected one (sealed, per identity and
provider, listed and revocable), with two differences: no refresh token is kept (a new token
comes from a new exchange, with the caller's token of that call), and it is used no longer
than the caller's token it was exchanged for was valid (its `exp`): what a caller's token
no longer allows, a kept exchange does not allow either.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kiln.connections.oauth import OAuthError, Tokens, tokens_from

GRANT = "urn:ietf:params:oauth:grant-type:token-exchange"
ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"  # noqa: S105 (a type name)
# What a run may be handed: an access token (a JWT access token may be typed as a JWT)
ISSUED_TYPES = (ACCESS_TOKEN_TYPE, "urn:ietf:params:oauth:token-type:jwt")


class ExchangeRefusedError(LookupError):
    """The provider did not exchange the caller's token; the message names its error code
    (never a token). A LookupError: the call path answers it as a tool error, with no run."""


def exchange_form(
    subject_token: str, scopes: tuple[str, ...], audience: str | None
) -> dict[str, str]:
    """The grant's own fields (the client's authentication is added by the caller)."""
    form = {
        "grant_type": GRANT,
        "subject_token": subject_token,
        "subject_token_type": ACCESS_TOKEN_TYPE,
        "requested_token_type": ACCESS_TOKEN_TYPE,
    }
    if scopes:
        form["scope"] = " ".join(scopes)
    if audience:
        form["audience"] = audience
    return form


def exchanged_tokens(
    answer: Mapping[str, Any], *, now: float, asked: tuple[str, ...], what: str, subject: str
) -> Tokens:
    """The provider's answer as the vault keeps it: no refresh token, and an expiry no later
    than the subject token's own."""
    issued = answer.get("issued_token_type")
    if issued is not None and issued not in ISSUED_TYPES:
        raise OAuthError(f"{what}: the provider issued a {issued} token, not an access token")
    tokens = tokens_from(answer, now=now, asked=asked, what=what)
    ends = [t for t in (tokens.expires_at, subject_expiry(subject)) if t is not None]
    return Tokens(tokens.access_token, None, min(ends) if ends else None, tokens.scopes)


def subject_expiry(token: str) -> float | None:
    """The `exp` of the caller's own token, which Kiln verified when the request arrived."""
    import jwt  # PyJWT, as the verifier (kiln.identity.tokens) loads it: only when needed

    try:
        claims = jwt.decode(token, options={"verify_signature": False})
    except jwt.PyJWTError:
        return None
    exp = claims.get("exp")
    return float(exp) if isinstance(exp, (int, float)) and not isinstance(exp, bool) else None
