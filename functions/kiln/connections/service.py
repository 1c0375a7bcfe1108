"""Connections: providers, the vault and the OAuth flows, as the edge and the call path use them.

Who a caller is, for the vault: `identity_of(principal)` -- `key:<key id>` for a stored key,
`key:<name>` for the server's own author key, `jwt:<subject>` for an OAuth caller; anonymous
callers have none (a tool declaring connections refuses them, saying why).
"""

from __future__ import annotations

import contextlib
import secrets
import time
from collections.abc import Callable
from typing import Any

from kiln.connections.exchange import ExchangeRefusedError, exchange_form, exchanged_tokens
from kiln.connections.oauth import (
    OAuthError,
    Tokens,
    authorize_url,
    pkce_pair,
    post_form,
    s256,
    tokens_from,
)
from kiln.connections.providers import Provider, ProviderStore, check_scopes
from kiln.connections.vault import PENDING_S, Pending, Vault

REFRESH_AHEAD_S = 60.0  # a token this close to expiry is refreshed before a run gets it


class ConnectError(Exception):
    """A connect flow that cannot finish; the message is safe to show the person."""


def identity_of(principal: Any) -> str | None:
    kind = getattr(principal, "kind", "anonymous")
    if kind == "anonymous":
        return None
    if kind == "key":
        return f"key:{getattr(principal, 'key_id', None) or principal.name}"
    return f"{kind}:{principal.name}"


class Connections:
    """Blocking: use from a thread."""

    def __init__(
        self, providers: ProviderStore, vault: Vault, *, clock: Callable[[], float] = time.time
    ) -> None:
        self.providers = providers
        self.vault = vault
        self._clock = clock

    def begin(
        self, identity: str, provider_name: str, scopes: Any, *, redirect_uri: str
    ) -> Pending:
        """A connect flow for this caller and provider: its state id, and the browser binding
        the page sets as a cookie."""
        provider = self.providers.get(provider_name)
        wanted = tuple(dict.fromkeys(provider.scopes + check_scopes(scopes)))
        verifier, _ = pkce_pair()
        pending = Pending(
            state=secrets.token_urlsafe(24),
            identity=identity,
            provider=provider.name,
            scopes=wanted,
            verifier=verifier,
            redirect_uri=redirect_uri,
            binding=secrets.token_urlsafe(24),
            expires_at=self._clock() + PENDING_S,
        )
        self.vault.begin(pending)
        return pending

    def authorize_url(self, pending: Pending) -> str:
        """Where the person's browser goes next: the provider's consent page."""
        provider = self.providers.get(pending.provider)
        challenge = s256(pending.verifier)
        return authorize_url(
            provider.authorize_url,
            client_id=provider.client_id,
            redirect_uri=pending.redirect_uri,
            scopes=pending.scopes,
            state=pending.state,
            challenge=challenge,
        )

    def finish(
        self, state: str, *, code: str | None, error: str | None, binding: str | None
    ) -> Pending:
        """The callback: the flow spent (once), the code exchanged, the tokens sealed."""
        pending = self.vault.spend(state) if state else None
        if pending is None:
            raise ConnectError("unknown, expired or already used state: start the connection again")
        if not binding or not secrets.compare_digest(binding, pending.binding):
            raise ConnectError("this browser did not start this connection: start it again here")
        if error:
            raise ConnectError(f"the provider said {error}: nothing was connected")
        if not code:
            raise ConnectError("the provider sent no code: nothing was connected")
        provider = self.providers.get(pending.provider)
        answer = post_form(
            provider.token_url,
            self._client_form(
                provider,
                {
                    "grant_type": "authorization_code",
                    "code": code,
                    "redirect_uri": pending.redirect_uri,
                    "code_verifier": pending.verifier,
                },
            ),
            what=f"connecting {provider.name}",
        )
        tokens = tokens_from(answer, now=self._clock(), asked=pending.scopes, what=provider.name)
        self.vault.put(pending.identity, provider.name, tokens)
        return pending

    def access_token(
        self, identity: str, provider_name: str, scopes: tuple[str, ...]
    ) -> str | None:
        """A usable access token of this caller for this provider with these scopes, refreshed
        if it is about to expire; None: the caller must connect (again)."""
        tokens = self.vault.tokens(identity, provider_name)
        if tokens is None or not set(scopes) <= set(tokens.scopes):
            return None
        if tokens.expires_at is None or tokens.expires_at - REFRESH_AHEAD_S > self._clock():
            return tokens.access_token
        if tokens.refresh_token is None:
            return None
        provider = self.providers.get(provider_name)
        try:
            answer = post_form(
                provider.token_url,
                self._client_form(
                    provider,
                    {
                        "grant_type": "refresh_token",
                        "refresh_token": tokens.refresh_token,
                    },
                ),
                what=f"refreshing {provider.name}",
            )
            fresh = tokens_from(answer, now=self._clock(), asked=tokens.scopes, what=provider.name)
        except OAuthError as problem:
            if problem.code in ("invalid_grant", "invalid_client", "unauthorized_client"):
                self.vault.delete(identity, provider_name)
            return None
        if fresh.refresh_token is None:  # the provider kept the old refresh token valid
            fresh = Tokens(fresh.access_token, tokens.refresh_token, fresh.expires_at, fresh.scopes)
        self.vault.put(identity, provider_name, fresh)
        return fresh.access_token

    def token_for(
        self,
        identity: str,
        provider_name: str,
        scopes: tuple[str, ...],
        *,
        subject_token: str | None = None,
    ) -> str | None:
        """`access_token`; else, for an OAuth caller (`subject_token`: its own bearer token) at a
        provider registered for token exchange, that token exchanged for the provider's (RFC
        8693, exchange.py) and kept. None: the caller must connect. ExchangeRefusedError."""
        token = self.access_token(identity, provider_name, scopes)
        if token is not None or subject_token is None:
            return token
        provider = self.providers.get(provider_name)
        if not provider.token_exchange:
            return None
        wanted = tuple(dict.fromkeys(provider.scopes + check_scopes(scopes)))
        form = exchange_form(subject_token, wanted, provider.exchange_audience)
        try:
            what = f"exchanging your token at {provider.name}"
            answer = post_form(provider.token_url, self._client_form(provider, form), what=what)
            tokens = exchanged_tokens(
                answer, now=self._clock(), asked=wanted, what=what, subject=subject_token
            )
        except OAuthError as problem:
            raise ExchangeRefusedError(
                f"it acts for you at {provider.name!r} with your own OAuth token, exchanged there "
                f"for one of its own (RFC 8693), and the exchange failed ({problem})"
            ) from None
        if not set(scopes) <= set(tokens.scopes):
            raise ExchangeRefusedError(
                f"it acts for you at {provider.name!r} and needs the scopes "
                f"{' '.join(scopes)}, but the exchange granted only {' '.join(tokens.scopes)}"
            )
        self.vault.put(identity, provider.name, tokens)
        return tokens.access_token

    def revoke(self, identity: str, provider_name: str) -> bool:
        """Forget the caller's connection, and tell the provider (best effort) to revoke it."""
        tokens = self.vault.tokens(identity, provider_name)
        removed = self.vault.delete(identity, provider_name)
        if tokens is not None:
            provider = self.providers.get(provider_name)
            if provider.revoke_url:
                for token, hint in (
                    (tokens.refresh_token, "refresh_token"),
                    (tokens.access_token, "access_token"),
                ):
                    if token:
                        with contextlib.suppress(OAuthError):  # forgotten here either way
                            post_form(
                                provider.revoke_url,
                                self._client_form(
                                    provider,
                                    {
                                        "token": token,
                                        "token_type_hint": hint,
                                    },
                                ),
                                what=f"revoking {provider.name}",
                            )
        return removed

    def _client_form(self, provider: Provider, form: dict[str, str]) -> dict[str, str]:
        form = {**form, "client_id": provider.client_id}
        secret = self.providers.client_secret(provider.name)
        if secret:
            form["client_secret"] = secret
        return form
