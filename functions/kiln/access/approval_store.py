"""Approvals that wait for a person, as DynamoDB items in the catalog's table.

| pk               | sk     | what                                                              |
| ---------------- | ------ | ----------------------------------------------------------------- |
| `APPROVAL#WAIT`  | `<id>` | one approval: the call (tool, revision, arguments, caller), its   |
|                  |        | task's owner and id, approvers, state, deadline, who decided      |

An approval's state moves only forward, each step one conditional update, so concurrent
deciders (two approvers, a replayed request, two worker starts) cannot both win:

    pending -> approved -> running        (the run happens once: only `running` runs it)
    pending -> denied | expired           (the task ends, unrun)

`approved` is refused after the deadline (`expired` instead). The id is random (128 bits) and
is not the task's id, which stays its caller's capability. Items stay a week after their
deadline (the table's TTL attribute `expires_at`), so decided approvals can still be shown.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import KW_ONLY, asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from botocore.exceptions import ClientError

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

State = Literal["pending", "approved", "running", "denied", "expired"]
PK = "APPROVAL#WAIT"
KEEP_AFTER_S = 7 * 24 * 3600
MAX_ARGUMENTS = 256 * 1024


def iso(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


@dataclass(frozen=True)
class Waiting:
    """One approval a call waits for."""

    id: str
    state: str
    tool: str
    revision: int  # the revision the call runs
    head: int  # the tool's head revision when the call was made (a change since: refused)
    arguments: Mapping[str, Any]
    caller: str  # the caller's label: key:ci, jwt:<sub>, anonymous
    view: str | None
    approvers: tuple[str, ...]
    owner: str  # the task's owner partition (kiln.tasks.store.owner_key)
    task_id: str
    created_at: float
    deadline: float  # epoch seconds: pending past it is expired
    _: KW_ONLY
    key_id: str | None = None  # a keyed caller's key id: its key must still be valid
    decided_by: str | None = None
    decided_at: float | None = None
    reason: str | None = None

    def public(self) -> dict[str, Any]:
        """What an approver is shown (never the task's id or owner)."""
        shown: dict[str, Any] = {
            k: v for k, v in asdict(self).items() if k not in ("owner", "task_id", "key_id")
        }
        shown["approvers"] = list(self.approvers)
        shown["created_at"] = iso(self.created_at)
        shown["expires_at"] = iso(self.deadline)
        del shown["deadline"]
        if self.decided_at is not None:
            shown["decided_at"] = iso(self.decided_at)
        return shown


@dataclass(frozen=True)
class Moved:
    """The outcome of a state change: `done`, and the approval as it is now."""

    done: bool
    approval: Waiting | None


@dataclass(eq=False)
class ApprovalStore:
    ddb: DynamoDBClient
    _: KW_ONLY
    table: str
    clock: Callable[[], float] = time.time
    new_id: Callable[[], str] = field(default=lambda: secrets.token_hex(16))

    def create(self, approval: Waiting) -> None:
        body = json.dumps(approval.arguments, separators=(",", ":"))
        if len(body) > MAX_ARGUMENTS:
            raise ValueError(f"its arguments take more than {MAX_ARGUMENTS // 1024} KiB")
        item: dict[str, Any] = {
            "pk": {"S": PK},
            "sk": {"S": approval.id},
            "state": {"S": approval.state},
            "tool": {"S": approval.tool},
            "revision": {"N": str(approval.revision)},
            "head": {"N": str(approval.head)},
            "arguments": {"S": body},
            "caller": {"S": approval.caller},
            "approvers": {"L": [{"S": a} for a in approval.approvers]},
            "owner": {"S": approval.owner},
            "task_id": {"S": approval.task_id},
            "created_at": {"N": repr(approval.created_at)},
            "deadline": {"N": repr(approval.deadline)},
            "expires_at": {"N": str(int(approval.deadline + KEEP_AFTER_S))},
        }
        if approval.view is not None:
            item["view"] = {"S": approval.view}
        if approval.key_id is not None:
            item["key_id"] = {"S": approval.key_id}
        self.ddb.put_item(
            TableName=self.table, Item=item, ConditionExpression="attribute_not_exists(pk)"
        )

    def get(self, approval_id: str) -> Waiting | None:
        found = self.ddb.get_item(
            TableName=self.table, Key=_key(approval_id), ConsistentRead=True
        ).get("Item")
        return _approval(found) if found else None

    def listed(self, *, limit: int = 200) -> list[Waiting]:
        """Every approval still kept, newest first."""
        items: list[Waiting] = []
        kwargs: dict[str, Any] = {
            "TableName": self.table,
            "KeyConditionExpression": "pk = :pk",
            "ExpressionAttributeValues": {":pk": {"S": PK}},
            "ConsistentRead": True,
        }
        while len(items) < limit:
            page = self.ddb.query(**kwargs)
            items.extend(_approval(raw) for raw in page.get("Items", []))
            if "LastEvaluatedKey" not in page:
                break
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]
        items.sort(key=lambda a: a.created_at, reverse=True)
        return items[:limit]

    def decide(
        self, approval_id: str, state: State, *, by: str, reason: str | None = None
    ) -> Moved:
        """pending -> approved | denied | expired, once. `approved` and `denied` only before
        the deadline."""
        now = self.clock()
        names = {"#s": "state"}
        values: dict[str, Any] = {
            ":from": {"S": "pending"},
            ":to": {"S": state},
            ":by": {"S": by},
            ":at": {"N": repr(now)},
        }
        update = "SET #s = :to, decided_by = :by, decided_at = :at"
        condition = "#s = :from"
        if state != "expired":
            condition += " AND deadline > :at"
        else:
            condition += " AND deadline <= :at"
        if reason:
            update += ", reason = :why"
            values[":why"] = {"S": reason[:500]}
        return self._move(approval_id, update, condition, names, values)

    def claim_run(self, approval_id: str) -> Moved:
        """approved -> running, once: whoever wins runs the call."""
        names = {"#s": "state"}
        values = {":from": {"S": "approved"}, ":to": {"S": "running"}}
        return self._move(approval_id, "SET #s = :to", "#s = :from", names, values)

    def _move(
        self,
        approval_id: str,
        update: str,
        condition: str,
        names: dict[str, str],
        values: dict[str, Any],
    ) -> Moved:
        try:
            answer = self.ddb.update_item(
                TableName=self.table,
                Key=_key(approval_id),
                UpdateExpression=update,
                ConditionExpression=f"attribute_exists(pk) AND {condition}",
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=values,
                ReturnValues="ALL_NEW",
            )
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
                raise
            return Moved(False, self.get(approval_id))
        return Moved(True, _approval(answer["Attributes"]))


def _key(approval_id: str) -> dict[str, Any]:
    return {"pk": {"S": PK}, "sk": {"S": approval_id}}


def _approval(raw: Mapping[str, Any]) -> Waiting:
    def s(name: str) -> str | None:
        value = raw.get(name)
        return value["S"] if value else None

    def n(name: str) -> float | None:
        value = raw.get(name)
        return float(value["N"]) if value else None

    return Waiting(
        id=raw["sk"]["S"],
        state=raw["state"]["S"],
        tool=raw["tool"]["S"],
        revision=int(raw["revision"]["N"]),
        head=int(raw["head"]["N"]),
        arguments=json.loads(raw["arguments"]["S"]),
        caller=raw["caller"]["S"],
        view=s("view"),
        approvers=tuple(a["S"] for a in raw["approvers"]["L"]),
        owner=raw["owner"]["S"],
        task_id=raw["task_id"]["S"],
        created_at=float(raw["created_at"]["N"]),
        deadline=float(raw["deadline"]["N"]),
        key_id=s("key_id"),
        decided_by=s("decided_by"),
        decided_at=n("decided_at"),
        reason=s("reason"),
    )
