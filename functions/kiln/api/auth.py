"""Access control at the HTTP edge: one object the app asks "who is this, may they?"."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from functools import cached_property
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from kiln.access.secrets import SecretStore, secret_env
from kiln.aws.clients import AwsClients
from kiln.identity.keys import KeyStore
from kiln.identity.metadata import protected_resource_metadata, resource_path_for
from kiln.identity.policy import Authenticator, Permission, Principal
from kiln.identity.settings import check_audience
from kiln.identity.tokens import JwtVerifier
from kiln.settings import Settings

STATIC_AUTHOR_NAME = "author"  # how KILN_AUTHOR_KEY appears in audit records


class AccessControl:
    """Keys, tokens, metadata documents and per-tool secrets for one running app."""

    def __init__(self, settings: Settings, clients: AwsClients) -> None:
        auth = settings.auth
        check_audience(auth, settings.public_base_url)  # Settings made in code skip from_env
        self.settings = settings
        self.auth = auth
        self._clients = clients
        self.keys = KeyStore(clients.dynamodb, table=settings.table)
        verifier = (
            JwtVerifier(issuer=auth.oauth_issuer, jwks_url=auth.oauth_jwks_url, scopes=auth.scopes)
            if auth.oauth_issuer
            else None
        )
        static: dict[str, tuple[str, Permission]] = {}
        if settings.author_key:
            static[settings.author_key] = (STATIC_AUTHOR_NAME, "author")
        self.authenticator = Authenticator(
            keys=self.keys,
            verifier=verifier,
            scopes=auth.scopes,
            anonymous_calls=settings.public_anonymous,
            audiences=auth.oauth_audiences,
            public_url=settings.public_base_url,
            static_keys=static,
        )

    @cached_property
    def secrets(self) -> SecretStore:
        """Made on first use: if no tool declares a secret, no SSM client is ever built."""
        session = self._clients.session
        ssm = session.client("ssm", endpoint_url=self.settings.endpoint_url)
        return SecretStore(ssm, self.auth.secrets_prefix)

    def base_url(self, request: Request) -> str:
        if self.settings.public_base_url:
            return self.settings.public_base_url.rstrip("/")
        return str(request.base_url).rstrip("/")

    async def require(self, request: Request, need: Permission, resource_path: str) -> Principal:
        """The caller, if it may do what `need` names on this resource; else AuthError."""
        header = request.headers.get("authorization")
        base = self.base_url(request)
        if not header:  # no lookup to make: answer without a thread hop
            return self.authenticator.authenticate(
                header, need=need, resource_path=resource_path, base_url=base
            )
        return await asyncio.to_thread(
            self.authenticator.authenticate,
            header,
            need=need,
            resource_path=resource_path,
            base_url=base,
        )

    def metadata_response(self, request: Request) -> Response:
        resource_path = resource_path_for(request.url.path)
        if resource_path is None:
            return JSONResponse(
                {"error": {"code": "not_found", "message": "no protected resource at this path"}},
                status_code=404,
            )
        document = protected_resource_metadata(
            base_url=self.base_url(request),
            resource_path=resource_path,
            authorization_servers=self.auth.authorization_servers,
            scopes=self.auth.scopes,
        )
        return JSONResponse(document, headers={"cache-control": "public, max-age=300"})

    def values_for(self, tool: Any) -> Mapping[str, str]:
        """The tool's declared secrets for its run (`CatalogBackend`'s SecretValues)."""
        names = tuple(getattr(tool.head, "secrets", ()) or ())
        if not names:
            return {}
        return secret_env(self.secrets, tool.id, names)
