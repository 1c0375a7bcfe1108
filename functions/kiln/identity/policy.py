"""Who is calling and whether they may: bearer credential in, Principal or AuthError out."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Literal

from kiln.access.quotas import NO_QUOTA, Quota
from kiln.errors import UNAUTHORIZED, KilnError
from kiln.identity.metadata import metadata_url, resource_url

if TYPE_CHECKING:
    from kiln.identity.keys import KeyStore
from kiln.identity.tokens import JwtVerifier, ScopeNames, TokenError

Permission = Literal["call", "author"]
PrincipalKind = Literal["anonymous", "key", "jwt"]

_GRANTS: dict[str, frozenset[str]] = {
    "call": frozenset({"call"}),
    "author": frozenset({"author", "call"}),  # an author may do everything a caller may
}


@dataclass(frozen=True)
class Principal:
    kind: PrincipalKind
    name: str
    scopes: frozenset[str] = field(default_factory=frozenset)
    key_id: str | None = None  # a stored key's id (quota counters are kept per key)
    view: str | None = None  # the view a key is bound to: it sees only that view's tools
    quota: Quota = NO_QUOTA  # a key's own limits
    confirm: str | None = None  # a key's own approvals policy (kiln.access.approvals)
    approvers: tuple[str, ...] = ()  # ... answered by one of these people (access/waiting.py)
    grants: frozenset[str] = field(default_factory=frozenset)  # a token's scope strings
    client: str | None = None  # a token's client_id / azp
    # An OAuth caller's own bearer token, only for exchanging it at a provider that trusts the
    # same IdP (RFC 8693, kiln.connections.exchange); never shown, logged or stored.
    bearer: str | None = field(default=None, repr=False, compare=False)

    def can(self, permission: Permission) -> bool:
        return permission in self.scopes

    @property
    def label(self) -> str:
        """How audit records and `created_by` name this principal."""
        return "anonymous" if self.kind == "anonymous" else f"{self.kind}:{self.name}"


ANONYMOUS = Principal("anonymous", "anonymous", _GRANTS["call"])


class AuthError(KilnError):
    """Answer with `status` and this `WWW-Authenticate` header; `message` is safe to show."""

    code = UNAUTHORIZED
    _REST_CODES: ClassVar[dict[int, str]] = {
        400: "invalid_request",
        401: "unauthorized",
        403: "forbidden",
    }

    def __init__(self, status: int, www_authenticate: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.rest_code = self._REST_CODES[status]
        self.www_authenticate = www_authenticate

    @property
    def rpc_message(self) -> str:
        return f"Unauthorized: {self.message}"

    def headers(self) -> dict[str, str]:
        return {"www-authenticate": self.www_authenticate}


class Authenticator:
    """Checks the `Authorization` header of one request against what its route needs.

    Blocking (a DynamoDB read, maybe a JWKS fetch): call it from a worker thread in async code.
    """

    def __init__(
        self,
        *,
        keys: KeyStore | None,
        verifier: JwtVerifier | None = None,
        scopes: ScopeNames = ScopeNames(),  # noqa: B008 (frozen, immutable)
        anonymous_calls: bool = False,
        audiences: Sequence[str] = (),
        public_url: str | None = None,
        static_keys: Mapping[str, tuple[str, Permission]] | None = None,
    ) -> None:
        """`static_keys`: secret -> (name, permission) of keys configured outside the store,
        such as KILN_AUTHOR_KEY, the key `kiln dev` prints.
        A JWT must name one of `audiences`, or `public_url` (the server's fixed base URL) or
        `public_url` + the route's path; never a URL taken from the request's Host."""
        self._keys = keys
        self._static = [
            (hashlib.sha256(secret.encode()).digest(), name, permission)
            for secret, (name, permission) in (static_keys or {}).items()
        ]
        self._verifier = verifier
        self._scopes = verifier.scopes if verifier else scopes
        self._anonymous_calls = anonymous_calls
        self._audiences = tuple(audiences)
        self._public_url = public_url.rstrip("/") if public_url else None

    def authenticate(
        self,
        authorization: str | None,
        *,
        need: Permission,
        resource_path: str,
        base_url: str,
    ) -> Principal:
        def fail(status: int, message: str, error: str | None = None) -> AuthError:
            challenge = self.challenge(
                need=need, resource_path=resource_path, base_url=base_url, error=error,
                description=message if error else None,
            )  # fmt: skip
            return AuthError(status, challenge, message)

        if not authorization or not authorization.strip():
            if self.anonymous(need) is not None:
                return ANONYMOUS
            raise fail(401, "this endpoint needs a bearer credential (an API key or OAuth token)")
        scheme, _, token = authorization.strip().partition(" ")
        if scheme.lower() != "bearer":
            raise fail(401, "use the Bearer scheme: 'Authorization: Bearer <credential>'")
        token = token.strip()
        if not token or any(c.isspace() for c in token):
            raise fail(400, "the Bearer credential is empty or malformed", "invalid_request")

        principal = self._identify(token, resource_path=resource_path)
        if principal is None:
            raise fail(401, "the API key is unknown or revoked", "invalid_token")
        if isinstance(principal, str):
            raise fail(401, principal, "invalid_token")
        if not principal.can(need):
            raise fail(403, f"this needs the {self._scopes.of(need)} scope", "insufficient_scope")
        return principal

    def anonymous(self, need: Permission) -> Principal | None:
        """The anonymous caller, when a request with no credential may do what `need` names."""
        return ANONYMOUS if self._anonymous_calls and need == "call" else None

    def challenge(
        self,
        *,
        need: Permission,
        resource_path: str,
        base_url: str,
        error: str | None = None,
        description: str | None = None,
    ) -> str:
        parts = []
        if error:
            parts.append(f'error="{error}"')
        if description:
            parts.append(f'error_description="{_quoted(description)}"')
        parts.append(f'scope="{self._scopes.of(need)}"')
        parts.append(f'resource_metadata="{metadata_url(base_url, resource_path)}"')
        return "Bearer " + ", ".join(parts)

    def _identify(self, token: str, *, resource_path: str) -> Principal | str | None:
        """A Principal, None for an unknown key, or the reason a token is refused."""
        digest = hashlib.sha256(token.encode()).digest()
        for expected, name, permission in self._static:
            if hmac.compare_digest(digest, expected):
                return Principal("key", name, _GRANTS[permission])
        if token.startswith("kiln_"):
            record = self._keys.authenticate(token) if self._keys else None
            if record is None:
                return None
            return Principal(
                "key",
                record.name,
                _GRANTS[record.scope],
                key_id=record.key_id,
                view=record.view,
                quota=record.quota,
                confirm=record.confirm,
                approvers=record.approvers,
            )
        if self._verifier is None:
            return "the bearer credential is not a Kiln API key"
        audiences = list(self._audiences)
        if self._public_url:
            audiences += [resource_url(self._public_url, resource_path), self._public_url]
        try:
            verified = self._verifier.verify(token, audiences=audiences)
        except TokenError as exc:
            return str(exc)
        client = verified.claims.get("client_id") or verified.claims.get("azp")
        return Principal(
            "jwt",
            verified.subject,
            verified.permissions,
            grants=verified.granted,
            client=str(client) if client else None,
            bearer=token,
        )


def _quoted(text: str) -> str:
    # RFC 6750 error_description: printable ASCII without '"' and '\'.
    return "".join(c for c in text if 0x20 <= ord(c) <= 0x7E and c not in '"\\')
