"""The OAuth providers an operator registered: one DynamoDB item each (`CONNPROVIDER#<name>`),
the client secret beside the tools' secrets in SSM as a SecureString
(`<secrets prefix>/_connections/<name>/client_secret`: a tool id never starts with `_`, so no
tool's secrets folder can hold it). The secret leaves this module only for the token endpoint.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from kiln.connections.oauth import discover

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_ssm import SSMClient

NAME = re.compile(r"^[a-z][a-z0-9-]{0,31}$")
SCOPE = re.compile(r"^[\x21\x23-\x5b\x5d-\x7e]{1,128}$")  # RFC 6749 scope-token
MAX_SCOPES = 32


class ProviderError(Exception):
    """Bad provider input, said specifically (REST 422); `field` names the input it is about
    (`name`, `issuer`, `client_id`, ...; empty when it is about the whole body)."""

    def __init__(self, message: str, field: str = "") -> None:
        super().__init__(message)
        self.field = field


class ProviderNotFoundError(ProviderError, LookupError):
    pass


@dataclass(frozen=True)
class Provider:
    name: str
    authorize_url: str
    token_url: str
    client_id: str
    scopes: tuple[str, ...] = ()
    revoke_url: str | None = None
    issuer: str | None = None
    # RFC 8693: an OAuth caller's own token is exchanged for this provider's (exchange.py)
    token_exchange: bool = False
    exchange_audience: str | None = None  # the `audience` asked in the exchange, if any

    def public(self) -> dict[str, Any]:
        """What REST shows: everything but the secret (which this object never holds)."""
        shown = asdict(self)
        shown["scopes"] = list(self.scopes)
        return shown


def check_name(name: object) -> str:
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise ProviderError(
            "provider name must be 1-32 characters from a-z 0-9 -, starting with a letter",
            "name",
        )
    return name


def check_scopes(scopes: object, *, what: str = "scopes") -> tuple[str, ...]:
    if not isinstance(scopes, (list, tuple)) or not all(isinstance(s, str) for s in scopes):
        raise ProviderError(f"{what} must be a list of strings", what)
    if len(scopes) > MAX_SCOPES:
        raise ProviderError(f"{what}: at most {MAX_SCOPES}", what)
    for scope in scopes:
        if not SCOPE.fullmatch(scope):
            raise ProviderError(
                f"{what}: {scope!r} is not an OAuth scope token (no spaces, quotes or backslashes)",
                what,
            )
    return tuple(dict.fromkeys(scopes))


def check_url(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise ProviderError(f"{what} must be a URL string", what)
    parts = urllib.parse.urlsplit(value)
    local = parts.hostname in ("127.0.0.1", "localhost", "::1")
    if parts.scheme != "https" and not (parts.scheme == "http" and local):
        raise ProviderError(f"{what} must be an https URL (http only on loopback): {value!r}", what)
    if parts.fragment or not parts.hostname:
        raise ProviderError(f"{what} must have a host and no #fragment: {value!r}", what)
    return value


def provider_from(name: str, body: Mapping[str, Any]) -> Provider:
    """A Provider from REST/CLI input; with `issuer`, the endpoints come from its metadata."""
    check_name(name)
    known = {
        "authorize_url",
        "token_url",
        "client_id",
        "client_secret",
        "scopes",
        "revoke_url",
        "issuer",
        "token_exchange",
        "exchange_audience",
    }
    extra = sorted(set(body) - known)
    if extra:
        raise ProviderError(
            f"unknown field(s): {', '.join(extra)} (known: {', '.join(sorted(known))})"
        )
    found = dict(body)
    issuer = found.get("issuer")
    if issuer is not None:
        check_url(issuer, "issuer")
        meta = discover(issuer)
        found.setdefault("authorize_url", meta["authorization_endpoint"])
        found.setdefault("token_url", meta["token_endpoint"])
        if meta.get("revocation_endpoint"):
            found.setdefault("revoke_url", meta["revocation_endpoint"])
    for field in ("authorize_url", "token_url"):
        if found.get(field) is None:
            raise ProviderError(
                f"{field} is required (or give issuer, whose metadata names it)", field
            )
    client_id = found.get("client_id")
    if not isinstance(client_id, str) or not client_id or len(client_id) > 256:
        raise ProviderError("client_id is required: a string of 1-256 characters", "client_id")
    revoke = found.get("revoke_url")
    exchange, audience = _exchange(found)
    return Provider(
        name=name,
        authorize_url=check_url(found["authorize_url"], "authorize_url"),
        token_url=check_url(found["token_url"], "token_url"),
        client_id=client_id,
        scopes=check_scopes(found.get("scopes", [])),
        revoke_url=check_url(revoke, "revoke_url") if revoke is not None else None,
        issuer=issuer,
        token_exchange=exchange,
        exchange_audience=audience,
    )


def _exchange(found: Mapping[str, Any]) -> tuple[bool, str | None]:
    exchange = found.get("token_exchange", False)
    if not isinstance(exchange, bool):
        raise ProviderError("token_exchange must be true or false", "token_exchange")
    audience = found.get("exchange_audience")
    if audience is None:
        return exchange, None
    if not exchange:
        raise ProviderError(
            "exchange_audience is only used with token_exchange: true", "exchange_audience"
        )
    if not isinstance(audience, str) or not 0 < len(audience) <= 256 or not audience.isprintable():
        raise ProviderError(
            "exchange_audience must be a string of 1-256 printable characters", "exchange_audience"
        )
    return exchange, audience


class ProviderStore:
    """Blocking: use from a thread."""

    def __init__(
        self, dynamodb: DynamoDBClient, ssm: SSMClient, *, table: str, secrets_prefix: str = "/kiln"
    ) -> None:
        self._ddb = dynamodb
        self._ssm = ssm
        self._table = table
        self._prefix = secrets_prefix.rstrip("/")

    def put(self, provider: Provider, client_secret: str | None) -> None:
        if client_secret is not None:
            if not isinstance(client_secret, str) or not client_secret or len(client_secret) > 4096:
                raise ProviderError(
                    "client_secret must be a string of 1-4096 characters", "client_secret"
                )
            self._ssm.put_parameter(
                Name=self._secret_path(provider.name),
                Value=client_secret,
                Type="SecureString",
                Overwrite=True,
            )
        item: dict[str, Any] = {
            "pk": {"S": f"CONNPROVIDER#{provider.name}"},
            "sk": {"S": "PROVIDER"},
            "authorize_url": {"S": provider.authorize_url},
            "token_url": {"S": provider.token_url},
            "client_id": {"S": provider.client_id},
            "scopes": {"L": [{"S": s} for s in provider.scopes]},
        }
        if provider.revoke_url:
            item["revoke_url"] = {"S": provider.revoke_url}
        if provider.issuer:
            item["issuer"] = {"S": provider.issuer}
        if provider.token_exchange:
            item["token_exchange"] = {"BOOL": True}
        if provider.exchange_audience:
            item["exchange_audience"] = {"S": provider.exchange_audience}
        self._ddb.put_item(TableName=self._table, Item=item)

    def get(self, name: str) -> Provider:
        check_name(name)
        found = self._ddb.get_item(
            TableName=self._table,
            Key={"pk": {"S": f"CONNPROVIDER#{name}"}, "sk": {"S": "PROVIDER"}},
            ConsistentRead=True,
        ).get("Item")
        if found is None:
            raise ProviderNotFoundError(
                f"no connection provider named {name!r}"
                " (add it with `kiln connections providers add`)"
            )
        return _provider(name, found)

    def list(self) -> list[Provider]:
        found: list[Provider] = []
        pages = self._ddb.get_paginator("scan").paginate(
            TableName=self._table,
            FilterExpression="begins_with(pk, :p) AND sk = :s",
            ExpressionAttributeValues={":p": {"S": "CONNPROVIDER#"}, ":s": {"S": "PROVIDER"}},
        )
        for page in pages:
            for item in page.get("Items", []):
                found.append(_provider(item["pk"]["S"].split("#", 1)[1], item))
        return sorted(found, key=lambda p: p.name)

    def delete(self, name: str) -> None:
        self.get(name)
        self._ddb.delete_item(
            TableName=self._table,
            Key={"pk": {"S": f"CONNPROVIDER#{name}"}, "sk": {"S": "PROVIDER"}},
        )
        try:
            self._ssm.delete_parameter(Name=self._secret_path(name))
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") != "ParameterNotFound":
                raise

    def client_secret(self, name: str) -> str | None:
        try:
            found = self._ssm.get_parameter(Name=self._secret_path(name), WithDecryption=True)
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") == "ParameterNotFound":
                return None
            raise
        return str(found["Parameter"]["Value"])

    def _secret_path(self, name: str) -> str:
        return f"{self._prefix}/_connections/{check_name(name)}/client_secret"


def _provider(name: str, item: Mapping[str, Any]) -> Provider:
    return Provider(
        name=name,
        authorize_url=item["authorize_url"]["S"],
        token_url=item["token_url"]["S"],
        client_id=item["client_id"]["S"],
        scopes=tuple(s["S"] for s in item.get("scopes", {}).get("L", [])),
        revoke_url=item.get("revoke_url", {}).get("S"),
        issuer=item.get("issuer", {}).get("S"),
        token_exchange=item.get("token_exchange", {}).get("BOOL", False),
        exchange_audience=item.get("exchange_audience", {}).get("S"),
    )
