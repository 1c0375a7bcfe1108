"""Who is calling: a bearer credential in, a Principal (or AuthError) out, and the
protected-resource metadata that tells a client where to get a credential.

Made once by `kiln.stack` from the key store, the token verifier and `AuthSettings`; the
HTTP edge (`kiln.api.auth`) asks it with what a request carries.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kiln.identity.metadata import protected_resource_metadata
from kiln.identity.policy import Authenticator, Permission, Principal
from kiln.identity.settings import AuthSettings

if TYPE_CHECKING:
    from kiln.identity.keys import KeyStore


class Callers:
    """Keys, tokens and the metadata documents of one running Kiln."""

    def __init__(
        self,
        keys: KeyStore,
        authenticator: Authenticator,
        auth: AuthSettings,
        *,
        public_base_url: str | None,
    ) -> None:
        self.keys = keys
        self.authenticator = authenticator
        self.auth = auth
        self.public_base_url = public_base_url.rstrip("/") if public_base_url else None

    def base_url(self, request_base_url: str) -> str:
        """How clients reach this server: the configured URL, else the request's own."""
        return self.public_base_url or request_base_url.rstrip("/")

    def authenticate(
        self, header: str | None, *, need: Permission, resource_path: str, base_url: str
    ) -> Principal:
        """The caller, if it may do what `need` names on this resource; else AuthError."""
        return self.authenticator.authenticate(
            header, need=need, resource_path=resource_path, base_url=base_url
        )

    def metadata(self, *, base_url: str, resource_path: str) -> dict[str, Any]:
        """The RFC 9728 document for one protected resource."""
        return protected_resource_metadata(
            base_url=base_url,
            resource_path=resource_path,
            authorization_servers=self.auth.authorization_servers,
            scopes=self.auth.scopes,
        )
