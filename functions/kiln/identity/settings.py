"""OAuth and secrets configuration (part of `kiln.settings.Settings`, which reads the variables).

The rest of access control lives in `kiln.settings.Settings`: KILN_PUBLIC_ANONYMOUS,
KILN_ALLOWED_ORIGINS, KILN_AUTHOR_KEY and KILN_PUBLIC_BASE_URL (`check_audience` ties the
last to the OAuth settings).

- KILN_OAUTH_ISSUER: turns on OAuth resource-server mode, accepting JWTs from this issuer
  (compared with the `iss` claim exactly as written).
- KILN_OAUTH_JWKS_URL: the issuer's JWKS (default: discovered from the issuer's metadata).
- KILN_OAUTH_AUDIENCE: extra accepted audiences, comma-separated. Tokens are always accepted
  for `<KILN_PUBLIC_BASE_URL>` and `<KILN_PUBLIC_BASE_URL>/<path>` of the route they hit.
- KILN_OAUTH_CALL_SCOPE / KILN_OAUTH_AUTHOR_SCOPE: scope strings granting call / author
  (default `kiln:call` / `kiln:author`).
- KILN_SECRETS_PREFIX: SSM Parameter Store path prefix of per-tool secrets (default `/kiln`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kiln.identity.tokens import DEFAULT_AUTHOR_SCOPE, DEFAULT_CALL_SCOPE, ScopeNames


class AuthSettingsError(ValueError):
    pass


@dataclass(frozen=True)
class AuthSettings:
    oauth_issuer: str | None = None
    oauth_jwks_url: str | None = None
    oauth_audiences: tuple[str, ...] = ()
    scopes: ScopeNames = ScopeNames()  # noqa: RUF009 (frozen, immutable)
    secrets_prefix: str = "/kiln"

    @property
    def oauth(self) -> bool:
        return self.oauth_issuer is not None

    @property
    def authorization_servers(self) -> tuple[str, ...]:
        return (self.oauth_issuer,) if self.oauth_issuer else ()

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> AuthSettings:
        """Called by `kiln.settings.Settings.from_env` with the environment it read."""
        # The issuer is compared with the `iss` claim character for character: keep it as given.
        issuer = _url(env, "KILN_OAUTH_ISSUER", exact=True)
        audiences = _list(env, "KILN_OAUTH_AUDIENCE") or ()
        prefix = env.get("KILN_SECRETS_PREFIX", "/kiln").strip() or "/kiln"
        if not prefix.startswith("/") or prefix.endswith("/") or "//" in prefix:
            raise AuthSettingsError(
                "KILN_SECRETS_PREFIX must start with '/' and not end with '/', e.g. /kiln"
            )
        return cls(
            oauth_issuer=issuer,
            oauth_jwks_url=_url(env, "KILN_OAUTH_JWKS_URL"),
            oauth_audiences=audiences,
            scopes=ScopeNames(
                call=env.get("KILN_OAUTH_CALL_SCOPE", "").strip() or DEFAULT_CALL_SCOPE,
                author=env.get("KILN_OAUTH_AUTHOR_SCOPE", "").strip() or DEFAULT_AUTHOR_SCOPE,
            ),
            secrets_prefix=prefix,
        )


def check_audience(auth: AuthSettings, public_base_url: str | None) -> None:
    """OAuth needs a fixed audience: deriving it from the request's Host would let a caller
    choose it. Raises AuthSettingsError naming both ways to give one."""
    if auth.oauth and not (public_base_url or auth.oauth_audiences):
        raise AuthSettingsError(
            "KILN_OAUTH_ISSUER needs KILN_PUBLIC_BASE_URL or KILN_OAUTH_AUDIENCE: "
            "the audience a token must carry cannot come from the request"
        )


def _url(env: Mapping[str, str], name: str, *, exact: bool = False) -> str | None:
    value = env.get(name, "").strip()
    if not value:
        return None
    if not value.startswith(("https://", "http://")):
        raise AuthSettingsError(f"{name} must be an http(s) URL")
    return value if exact else value.rstrip("/")


def _list(env: Mapping[str, str], name: str) -> tuple[str, ...] | None:
    value = env.get(name)
    if value is None or not value.strip():
        return None
    return tuple(item.strip().rstrip("/") for item in value.split(",") if item.strip())
