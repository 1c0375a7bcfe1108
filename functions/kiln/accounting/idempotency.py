"""The store of idempotency keys: one DynamoDB item per (caller, tool, key), kept a window.

What a key means on the wire, and what is answered when, is `kiln.protocol.idempotency`'s.
Here: `IDEM#<sha256 of caller, tool and key>` / `CALL`, claimed with a conditional put
(`attribute_not_exists(pk)`, or an item whose window has passed: DynamoDB's TTL deletes
expired items within days, not at once, so an expired item counts as absent), then
answered with a conditional update that only the claim's holder (its `token`) can make. No
item is ever deleted by Kiln (the public function's role may put and update, not delete): a
claim given back is one whose window is set to end now. The first answer is kept
zlib-compressed; one larger than `max_answer_bytes` (as JSON, before compression) is not
kept: the item records its size, and the call is never run again for that key.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import time
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

from botocore.exceptions import ClientError

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

PREFIX = "IDEM#"
WINDOW_S = 24 * 3600
MAX_ANSWER_BYTES = 64 * 1024
ITEM_LIMIT_BYTES = 350_000  # under DynamoDB's 400 KB item, with room for the other fields
WAIT_S = 5.0


class Scope(Protocol):
    """Whose key (`kiln.protocol.idempotency.Scope`): caller, tool and key."""

    @property
    def caller(self) -> str: ...
    @property
    def tool(self) -> str: ...
    @property
    def key(self) -> str: ...


@dataclass(frozen=True)
class Held:
    """A key's item, as `kiln.protocol.idempotency.Held` reads it."""

    state: Literal["running", "done"]
    digest: str
    started_at: str
    lease_until: float
    token: str
    answer: Mapping[str, Any] | None = None
    answer_bytes: int = 0


def _failed_condition(error: ClientError) -> bool:
    return error.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException"


def _iso(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


class CallKeys:
    """`kiln.protocol.idempotency.KeptCalls` over the catalog table. Blocking."""

    def __init__(
        self,
        dynamodb: DynamoDBClient,
        *,
        table: str,
        window_s: float = WINDOW_S,
        max_answer_bytes: int = MAX_ANSWER_BYTES,
        wait_s: float = WAIT_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._ddb = dynamodb
        self._table = table
        self.window_s = window_s
        self.max_answer_bytes = min(max_answer_bytes, ITEM_LIMIT_BYTES)
        self._wait_s = wait_s
        self._clock = clock

    @property
    def wait_s(self) -> float:
        return self._wait_s

    @staticmethod
    def key(scope: Scope) -> dict[str, Any]:
        named = "\0".join((scope.caller, scope.tool, scope.key)).encode("utf-8", "surrogatepass")
        return {"pk": {"S": PREFIX + hashlib.sha256(named).hexdigest()}, "sk": {"S": "CALL"}}

    def look(self, scope: Scope) -> Held | None:
        found = self._ddb.get_item(TableName=self._table, Key=self.key(scope), ConsistentRead=True)
        return self._held(found.get("Item"))

    def claim(
        self, scope: Scope, digest: str, lease_s: float, *, again: bool = True
    ) -> tuple[str | None, Held | None]:
        now = self._clock()
        token = secrets.token_hex(8)
        item = {
            **self.key(scope),
            "state": {"S": "running"},
            "digest": {"S": digest},
            "token": {"S": token},
            "started_at": {"S": _iso(now)},
            "lease_until": {"N": f"{now + lease_s:.3f}"},
            "expires_at": {"N": str(int(now + self.window_s))},
        }
        try:
            self._ddb.put_item(
                TableName=self._table,
                Item=item,
                ConditionExpression="attribute_not_exists(pk) OR expires_at < :now",
                ExpressionAttributeValues={":now": {"N": str(int(now))}},
            )
        except ClientError as error:
            if not _failed_condition(error):
                raise
            held = self.look(scope)
            if held is None and again:  # given back or expired in between: try once more
                return self.claim(scope, digest, lease_s, again=False)
            if held is None:
                raise RuntimeError("an idempotency key changed twice while claimed") from None
            return None, held
        return token, None

    def take_over(self, scope: Scope, token: str, lease_s: float) -> str | None:
        """Claim a running item whose lease passed (its holder died); None if another did."""
        now = self._clock()
        mine = secrets.token_hex(8)
        try:
            self._ddb.update_item(
                TableName=self._table,
                Key=self.key(scope),
                UpdateExpression="SET #token = :mine, lease_until = :lease",
                ConditionExpression="#token = :theirs AND #state = :running",
                ExpressionAttributeNames={"#token": "token", "#state": "state"},
                ExpressionAttributeValues={
                    ":mine": {"S": mine},
                    ":theirs": {"S": token},
                    ":running": {"S": "running"},
                    ":lease": {"N": f"{now + lease_s:.3f}"},
                },
            )
        except ClientError as error:
            if _failed_condition(error):
                return None
            raise
        return mine

    def keep(self, scope: Scope, token: str, answer: Mapping[str, Any]) -> None:
        """The first answer, kept for the key's window (or its size, over the cap)."""
        text = json.dumps(answer, separators=(",", ":"), ensure_ascii=False).encode(
            "utf-8", "surrogatepass"
        )
        value: dict[str, Any]
        if len(text) <= self.max_answer_bytes:
            field, value = "answer", {"B": zlib.compress(text, 6)}
        else:
            field, value = "answer_bytes", {"N": str(len(text))}
        self._update(
            scope, token, f"SET #state = :done, {field} = :answer",
            {":done": {"S": "done"}, ":answer": value},
        )  # fmt: skip

    def release(self, scope: Scope, token: str) -> None:
        """Give the key back: nothing ran, so the next call with it runs."""
        self._update(scope, token, "SET expires_at = :gone", {":gone": {"N": "0"}})

    def _update(self, scope: Scope, token: str, expression: str, values: dict[str, Any]) -> None:
        names = {"#token": "token"}
        if "#state" in expression:
            names["#state"] = "state"
        try:
            self._ddb.update_item(
                TableName=self._table,
                Key=self.key(scope),
                UpdateExpression=expression,
                ConditionExpression="#token = :token",
                ExpressionAttributeNames=names,
                ExpressionAttributeValues={**values, ":token": {"S": token}},
            )
        except ClientError as error:
            if not _failed_condition(error):
                raise
            # Taken over (a repeatable tool's abandoned claim): the later run's answer counts.

    def _held(self, item: Mapping[str, Any] | None) -> Held | None:
        if item is None or int(item["expires_at"]["N"]) < int(self._clock()):  # as `claim`
            return None
        answer = None
        if "answer" in item:
            answer = json.loads(zlib.decompress(item["answer"]["B"]).decode("utf-8"))
        return Held(
            state="done" if item["state"]["S"] == "done" else "running",
            digest=item["digest"]["S"],
            started_at=item["started_at"]["S"],
            lease_until=float(item["lease_until"]["N"]),
            token=item["token"]["S"],
            answer=answer,
            answer_bytes=int(item.get("answer_bytes", {}).get("N", "0")),
        )
