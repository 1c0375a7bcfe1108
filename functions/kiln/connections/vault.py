"""The vault: each caller's tokens per provider, sealed (`envelope.py`), in the catalog table.

Items: `CONNECTION#<identity>` / `<provider>` holds the sealed token pair and, in the clear,
only what listing needs (scopes, expiry, when connected); `CONNECT#<state id>` / `PENDING` is
a connect flow begun and not finished (its PKCE verifier sealed too), kept 10 minutes by the
table's TTL and taken out by a conditional delete, so a state is spent once.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from kiln.connections.envelope import KeyKeeper, SealError, open_sealed, seal
from kiln.connections.oauth import Tokens

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

PENDING_S = 600


@dataclass(frozen=True)
class Connection:
    identity: str
    provider: str
    scopes: tuple[str, ...]
    expires_at: float | None
    connected_at: float

    def public(self) -> dict[str, Any]:
        return {
            "identity": self.identity,
            "provider": self.provider,
            "scopes": list(self.scopes),
            "expires_at": _iso(self.expires_at) if self.expires_at else None,
            "connected_at": _iso(self.connected_at),
        }


@dataclass(frozen=True)
class Pending:
    state: str
    identity: str
    provider: str
    scopes: tuple[str, ...]
    verifier: str
    redirect_uri: str
    binding: str  # the browser's cookie value the callback must carry
    expires_at: float


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def _context(identity: str, provider: str) -> dict[str, str]:
    return {"kiln:identity": identity, "kiln:provider": provider}


class Vault:
    """Blocking: use from a thread."""

    def __init__(
        self,
        dynamodb: DynamoDBClient,
        keeper: KeyKeeper,
        *,
        table: str,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._ddb = dynamodb
        self._keeper = keeper
        self._table = table
        self._clock = clock

    # --- connections

    def put(self, identity: str, provider: str, tokens: Tokens) -> None:
        secret = json.dumps(
            {"access_token": tokens.access_token, "refresh_token": tokens.refresh_token}
        )
        sealed = seal(self._keeper, secret.encode(), _context(identity, provider))
        item: dict[str, Any] = {
            "pk": {"S": f"CONNECTION#{identity}"},
            "sk": {"S": provider},
            "sealed": {"S": json.dumps(sealed)},
            "scopes": {"L": [{"S": s} for s in tokens.scopes]},
            "connected_at": {"N": str(int(self._clock()))},
        }
        if tokens.expires_at is not None:
            item["token_expires_at"] = {"N": repr(float(tokens.expires_at))}
        self._ddb.put_item(TableName=self._table, Item=item)

    def tokens(self, identity: str, provider: str) -> Tokens | None:
        """The caller's tokens for this provider, opened; None when there are none, or the
        record does not open under this identity (planted or tampered)."""
        item = self._ddb.get_item(
            TableName=self._table, Key=self._key(identity, provider), ConsistentRead=True
        ).get("Item")
        if item is None:
            return None
        try:
            opened = json.loads(
                open_sealed(
                    self._keeper, json.loads(item["sealed"]["S"]), _context(identity, provider)
                )
            )
        except (SealError, ValueError, KeyError):
            return None
        expires = item.get("token_expires_at", {}).get("N")
        return Tokens(
            access_token=opened["access_token"],
            refresh_token=opened.get("refresh_token"),
            expires_at=float(expires) if expires else None,
            scopes=tuple(s["S"] for s in item.get("scopes", {}).get("L", [])),
        )

    def delete(self, identity: str, provider: str) -> bool:
        old = self._ddb.delete_item(
            TableName=self._table, Key=self._key(identity, provider), ReturnValues="ALL_OLD"
        ).get("Attributes")
        return old is not None

    def connections(self, identity: str | None = None) -> list[Connection]:
        """One caller's connections, or (operator) everyone's; never a token."""
        if identity is not None:
            pages = self._ddb.get_paginator("query").paginate(
                TableName=self._table,
                KeyConditionExpression="pk = :pk",
                ExpressionAttributeValues={":pk": {"S": f"CONNECTION#{identity}"}},
            )
        else:
            pages = self._ddb.get_paginator("scan").paginate(
                TableName=self._table,
                FilterExpression="begins_with(pk, :p)",
                ExpressionAttributeValues={":p": {"S": "CONNECTION#"}},
            )
        found = []
        for page in pages:
            for item in page.get("Items", []):
                expires = item.get("token_expires_at", {}).get("N")
                found.append(
                    Connection(
                        identity=item["pk"]["S"].split("#", 1)[1],
                        provider=item["sk"]["S"],
                        scopes=tuple(s["S"] for s in item.get("scopes", {}).get("L", [])),
                        expires_at=float(expires) if expires else None,
                        connected_at=float(item["connected_at"]["N"]),
                    )
                )
        return sorted(found, key=lambda c: (c.identity, c.provider))

    def _key(self, identity: str, provider: str) -> dict[str, Any]:
        return {"pk": {"S": f"CONNECTION#{identity}"}, "sk": {"S": provider}}

    # --- connect flows begun

    def begin(self, pending: Pending) -> None:
        sealed = seal(self._keeper, pending.verifier.encode(), {"kiln:state": pending.state})
        item: dict[str, Any] = {
            "pk": {"S": f"CONNECT#{pending.state}"},
            "sk": {"S": "PENDING"},
            "identity": {"S": pending.identity},
            "provider": {"S": pending.provider},
            "scopes": {"L": [{"S": s} for s in pending.scopes]},
            "verifier": {"S": json.dumps(sealed)},
            "redirect_uri": {"S": pending.redirect_uri},
            "binding": {"S": pending.binding},
            "expires_at": {"N": str(int(pending.expires_at))},
        }
        self._ddb.put_item(
            TableName=self._table, Item=item, ConditionExpression="attribute_not_exists(pk)"
        )

    def peek(self, state: str) -> Pending | None:
        item = self._ddb.get_item(
            TableName=self._table,
            Key={"pk": {"S": f"CONNECT#{state}"}, "sk": {"S": "PENDING"}},
            ConsistentRead=True,
        ).get("Item")
        return self._pending(state, item)

    def spend(self, state: str) -> Pending | None:
        """Take the flow out (once: a second spend finds nothing); None if unknown or expired."""
        try:
            old = self._ddb.delete_item(
                TableName=self._table,
                Key={"pk": {"S": f"CONNECT#{state}"}, "sk": {"S": "PENDING"}},
                ConditionExpression="attribute_exists(pk)",
                ReturnValues="ALL_OLD",
            ).get("Attributes")
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException":
                return None
            raise
        return self._pending(state, old)

    def _pending(self, state: str, item: Mapping[str, Any] | None) -> Pending | None:
        if item is None or float(item["expires_at"]["N"]) <= self._clock():
            return None
        try:
            verifier = open_sealed(
                self._keeper, json.loads(item["verifier"]["S"]), {"kiln:state": state}
            )
        except (SealError, ValueError):
            return None
        return Pending(
            state=state,
            identity=item["identity"]["S"],
            provider=item["provider"]["S"],
            scopes=tuple(s["S"] for s in item.get("scopes", {}).get("L", [])),
            verifier=verifier.decode(),
            redirect_uri=item["redirect_uri"]["S"],
            binding=item["binding"]["S"],
            expires_at=float(item["expires_at"]["N"]),
        )
