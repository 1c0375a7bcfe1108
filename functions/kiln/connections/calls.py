"""What a run of a tool declaring `connections` receives: for each provider it declared, the
caller's own access token, in `KILN_CONNECTION_<PROVIDER>` (upper case, `-` as `_`), for this
run only. Nothing else of the vault reaches the run: no other provider's token, no refresh
token, no other caller's. A caller without a usable connection gets no run but a link to
connect (`<base>/connect/<state>`), anonymous callers a refusal saying why. The protocol
offers the link as a URL-mode elicitation where the client takes one (kiln.protocol.urlmode):
its id is a digest of the flow's state, never the state itself.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from kiln.connections.providers import ProviderNotFoundError
from kiln.connections.service import Connections, identity_of


class ConnectionNeededError(LookupError):
    """The caller must connect (or sign in) first; the message says how, with the link.

    With a link: `provider`, `scopes` (what the person is asked to grant), `url` and
    `elicitation_id` (a digest of the flow's state: it names the flow without being able to
    open or finish it)."""

    def __init__(
        self,
        message: str,
        url: str | None = None,
        *,
        provider: str = "",
        scopes: tuple[str, ...] = (),
    ) -> None:
        super().__init__(message)
        self.url = url
        self.provider = provider
        self.scopes = scopes
        self.elicitation_id = ""
        if url is not None:
            state = url.rsplit("/", 1)[-1]
            self.elicitation_id = hashlib.sha256(f"kiln-connect\0{state}".encode()).hexdigest()


def env_name(provider: str) -> str:
    return "KILN_CONNECTION_" + provider.upper().replace("-", "_")


class RunTokens:
    """The call path's ConnectionTokens (kiln.serving.backend). Blocking: use from a thread."""

    def __init__(self, connections: Connections) -> None:
        self._connections = connections

    def env_for(self, tool: Any, principal: Any, base_url: str | None) -> Mapping[str, str]:
        needs = tuple(getattr(tool.head, "connections", ()) or ())
        identity = identity_of(principal) if principal is not None else None
        if identity is None:
            raise ConnectionNeededError(
                "it acts for its caller with their own account "
                f"({', '.join(n['provider'] for n in needs)}), so an anonymous caller cannot "
                "use it: call it with a key or an OAuth token"
            )
        env: dict[str, str] = {}
        for need in needs:
            provider, scopes = need["provider"], tuple(need.get("scopes", ()))
            try:
                token = self._connections.token_for(  # an OAuth caller's may be exchanged
                    identity, provider, scopes, subject_token=getattr(principal, "bearer", None)
                )
            except ProviderNotFoundError:
                raise ConnectionNeededError(
                    f"it needs the provider {provider!r}, which this server has not registered "
                    "(an operator adds it with `kiln connections providers add`)"
                ) from None
            if token is None:
                raise self._connect_first(identity, provider, scopes, base_url)
            env[env_name(provider)] = token
        return env

    def _connect_first(
        self, identity: str, provider: str, scopes: tuple[str, ...], base_url: str | None
    ) -> ConnectionNeededError:
        if base_url is None:
            return ConnectionNeededError(
                f"it acts for you at {provider!r} and you have not connected it yet: "
                f"run `kiln connections connect {provider}`, then call the tool again"
            )
        base = base_url.rstrip("/")
        pending = self._connections.begin(
            identity, provider, scopes, redirect_uri=f"{base}/connect/callback"
        )
        url = f"{base}/connect/{pending.state}"
        return ConnectionNeededError(
            f"it acts for you at {provider!r} and you have not connected it yet: open {url} "
            "to connect (within 10 minutes), then call the tool again",
            url,
            provider=provider,
            scopes=pending.scopes,
        )
