"""OAuth resource-server mode: JWT access tokens from one issuer, checked against its JWKS."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import jwt as pyjwt

# Asymmetric algorithms only: a resource server never shares a signing secret, and "none" or
# HS256 with a public key as the secret are the classic forgeries.
DEFAULT_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384")
DEFAULT_CALL_SCOPE = "kiln:call"
DEFAULT_AUTHOR_SCOPE = "kiln:author"


class TokenError(Exception):
    """The token is not acceptable; the message says why without repeating the token."""


@dataclass(frozen=True)
class ScopeNames:
    """The OAuth scope strings that grant Kiln's two permissions."""

    call: str = DEFAULT_CALL_SCOPE
    author: str = DEFAULT_AUTHOR_SCOPE

    def of(self, permission: str) -> str:
        return self.author if permission == "author" else self.call


@dataclass(frozen=True)
class VerifiedToken:
    subject: str
    permissions: frozenset[str]  # subset of {"call", "author"}; author implies call
    granted: frozenset[str]  # the token's own scope strings
    claims: Mapping[str, Any] = field(repr=False, default_factory=dict)


class JwtVerifier:
    """Checks signature (JWKS), issuer, audience, expiry; maps scopes to call/author."""

    def __init__(
        self,
        *,
        issuer: str,
        jwks_url: str | None = None,
        scopes: ScopeNames = ScopeNames(),
        algorithms: Sequence[str] = DEFAULT_ALGORITHMS,
        leeway_s: float = 30.0,
        timeout_s: float = 5.0,
    ) -> None:
        self.issuer = issuer
        self.scopes = scopes
        self._jwks_url = jwks_url
        self._algorithms = list(algorithms)
        self._leeway = leeway_s
        self._timeout = timeout_s
        self._client: pyjwt.PyJWKClient | None = None

    def verify(self, token: str, *, audiences: Iterable[str]) -> VerifiedToken:
        """Raises TokenError for any token this server must not accept."""
        claims = self._claims(token, self._signing_key(token), audiences)
        granted = granted_scopes(claims)
        return VerifiedToken(
            subject=str(claims.get("sub") or claims.get("client_id") or "unknown"),
            permissions=permissions_for(granted, self.scopes),
            granted=granted,
            claims=claims,
        )

    def _signing_key(self, token: str) -> Any:
        """The issuer's key that signed `token` (its algorithm one this server accepts)."""
        import jwt as pyjwt  # PyJWT and cryptography load only when a token arrives

        try:
            header = pyjwt.get_unverified_header(token)
        except pyjwt.PyJWTError:
            raise TokenError("the bearer token is not a well-formed JWT") from None
        if header.get("alg") not in self._algorithms:
            raise TokenError("the token's signing algorithm is not accepted")
        try:
            return self._jwks().get_signing_key_from_jwt(token).key
        except pyjwt.PyJWKClientConnectionError:
            raise TokenError("the issuer's signing keys could not be fetched") from None
        except pyjwt.PyJWTError:
            raise TokenError("the token was not signed by a key of the configured issuer") from None

    def _claims(self, token: str, key: Any, audiences: Iterable[str]) -> dict[str, Any]:
        """The token's claims, its signature, expiry, issuer and audience checked."""
        import jwt as pyjwt

        try:
            claims: dict[str, Any] = pyjwt.decode(
                token,
                key,
                algorithms=self._algorithms,
                audience=list(audiences),
                issuer=self.issuer,
                leeway=self._leeway,
                options={"require": ["exp", "iss", "aud"]},
            )
        except pyjwt.ExpiredSignatureError:
            raise TokenError("the token has expired") from None
        except pyjwt.InvalidAudienceError:
            raise TokenError("the token was issued for another resource (audience)") from None
        except pyjwt.InvalidIssuerError:
            raise TokenError("the token comes from another issuer") from None
        except pyjwt.MissingRequiredClaimError as exc:
            raise TokenError(f"the token lacks the {exc.claim!r} claim") from None
        except pyjwt.ImmatureSignatureError:
            raise TokenError("the token is not valid yet") from None
        except pyjwt.PyJWTError:
            raise TokenError("the token's signature or claims are invalid") from None
        return claims

    def _jwks(self) -> pyjwt.PyJWKClient:
        import jwt as pyjwt

        if self._client is None:
            url = self._jwks_url or discover_jwks_url(self.issuer, timeout_s=self._timeout)
            self._client = pyjwt.PyJWKClient(url, cache_keys=True, lifespan=300, timeout=5)
        return self._client


def granted_scopes(claims: Mapping[str, Any]) -> frozenset[str]:
    """`scope` (RFC 9068: space-separated) and `scp` (a list, or a string) together."""
    found: set[str] = set()
    for claim in ("scope", "scp"):
        value = claims.get(claim)
        if isinstance(value, str):
            found.update(value.split())
        elif isinstance(value, list):
            found.update(v for v in value if isinstance(v, str))
    return frozenset(found)


def permissions_for(granted: Iterable[str], names: ScopeNames) -> frozenset[str]:
    granted = set(granted)
    if names.author in granted:
        return frozenset({"author", "call"})
    if names.call in granted:
        return frozenset({"call"})
    return frozenset()


def discover_jwks_url(issuer: str, *, timeout_s: float = 5.0) -> str:
    """`jwks_uri` from the issuer's RFC 8414 metadata, else its OpenID configuration."""
    # Imported here: http.client, email and ssl (~20 ms) are no part of the runner
    # function's init, which imports the settings (bench/runner/new_tenant.py).
    import urllib.request

    base = issuer.rstrip("/")
    candidates = [f"{base}/.well-known/openid-configuration"]
    scheme, _, rest = base.partition("://")
    host, slash, path = rest.partition("/")
    candidates.insert(0, f"{scheme}://{host}/.well-known/oauth-authorization-server{slash}{path}")
    for url in candidates:
        if not url.startswith(("https://", "http://")):
            continue
        try:
            with urllib.request.urlopen(url, timeout=timeout_s) as response:  # noqa: S310
                document = json.load(response)
        except (OSError, ValueError):
            continue
        if isinstance(document, dict) and isinstance(document.get("jwks_uri"), str):
            return str(document["jwks_uri"])
    raise TokenError("the issuer publishes no jwks_uri; set KILN_OAUTH_JWKS_URL")
