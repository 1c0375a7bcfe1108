"""Task records in the catalog's table (their own key prefix) and large payloads in S3.

| pk               | sk          | what                                                    |
| ---------------- | ----------- | ------------------------------------------------------- |
| `TASK#<owner>`   | `T#<id>`    | one task: tool, arguments, status, lease, result/error, |
|                  |             | `call`: its call's ledger ticket (kiln.accounting.gate)     |
|                  |             | `acts_for`: whom a task of a tool with connections acts for |
| `TASK#<owner>`   | `RUNNING`   | `running`: how many of the owner's tasks are working    |

`<owner>` is a hash of the caller (API key name or token subject; one shared value for
anonymous callers), so a lookup can only ever find the caller's own tasks, and the IAM
condition `dynamodb:LeadingKeys = TASK#*` confines the functions that write tasks to these
items. `expires_at` is the table's TTL attribute (DynamoDB deletes expired items within days,
so reads also treat an expired record as gone). Arguments and results larger than
`inline_limit` go to S3 under `tasks/`.

Every status change leaves `working` exactly once: the update is conditional on
`status = working` and decrements the owner's running count in the same transaction, which
also writes the call's ledger entry when it is given one, so a task's call is ledgered
exactly once, by whoever ends it (the worker, a cancel, a reader that finds its lease lost).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import KW_ONLY, dataclass, field
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from kiln.accounting.ledger import writes as ledger_writes

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_dynamodb.type_defs import TransactWriteItemTypeDef, UpdateTypeDef
    from mypy_boto3_s3 import S3Client

TASK_PREFIX = "TASK#"
COUNTER_SK = "RUNNING"
INLINE_LIMIT = 256 * 1024  # a DynamoDB item holds 400 KB; the rest of the record is small


class TaskLimitError(Exception):
    """The owner already has as many working tasks as allowed."""


class TaskTooLargeError(ValueError):
    """Arguments too large to keep in a task record (they are never spilled to S3: the public
    function may write task records, not objects)."""


def owner_key(label: str) -> str:
    """The partition an owner's tasks live in: a hash, so no caller identity sits in keys."""
    return hashlib.sha256(f"kiln-task-owner:{label}".encode()).hexdigest()[:32]


@dataclass(frozen=True)
class TaskItem:
    """One stored task."""

    owner: str
    task_id: str
    tool: str
    revision: int  # the tool revision the task runs (a view may pin an older one)
    version: str  # the MCP revision the result is shaped for
    arguments: Mapping[str, Any]
    status: str
    created_at: str
    updated_at: str
    ttl_ms: int
    poll_interval_ms: int
    expires_at: float  # epoch seconds
    lease_until: float  # epoch seconds; a working task past it has lost its worker
    status_message: str | None = None
    result: Mapping[str, Any] | None = None
    error: Mapping[str, Any] | None = None
    call: Mapping[str, Any] | None = None  # the call's ledger ticket (CallTicket.as_json)
    # A run that asked (input_required): its pending questions, key -> {method, params}; and
    # every answer so far, key -> the client's answer (the next run gets them all).
    inputs: Mapping[str, Any] | None = None
    answers: Mapping[str, Any] | None = None
    # Approvals its view or key require before it runs (kiln.access.approvals.Requirement
    # as JSON, with `caller`: who is asked), or None.
    confirm: Mapping[str, Any] | None = None
    # Who the run acts for, for a tool declaring connections (kiln.connections): the caller's
    # kind, name and key id (`TaskCaller`), and the base URL its connect link names.
    acts_for: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class TaskCaller:
    """The caller a task's run acts for, as the call path hands it to the vault (its kind,
    name and key id are what `kiln.connections.identity_of` reads): a tool acting for its
    caller gets that caller's own connections when its task runs in a worker."""

    kind: str
    name: str
    key_id: str | None = None

    @classmethod
    def of(cls, principal: Any) -> TaskCaller | None:
        kind = getattr(principal, "kind", "anonymous")
        if kind == "anonymous":
            return None
        return cls(kind, str(principal.name), getattr(principal, "key_id", None))

    def as_json(self, base_url: str | None) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "key_id": self.key_id, "base_url": base_url}


def _n(value: float) -> dict[str, str]:
    return {"N": repr(value) if isinstance(value, float) else str(value)}


def _key(owner: str, task_id: str) -> dict[str, Any]:
    return {"pk": {"S": TASK_PREFIX + owner}, "sk": {"S": "T#" + task_id}}


def _counter(owner: str) -> dict[str, Any]:
    return {"pk": {"S": TASK_PREFIX + owner}, "sk": {"S": COUNTER_SK}}


def _ledger_put(table: str, ledger: Mapping[str, Any] | None) -> list[TransactWriteItemTypeDef]:
    # Unconditional: its key is new (time and random id), and only the task's own condition
    # may cancel the move. Its day's totals count it after (`TaskStore.ledgered`).
    return [] if ledger is None else ledger_writes(table, ledger)


def _failed_condition(error: ClientError) -> bool:
    code = error.response.get("Error", {}).get("Code")
    return code in {"ConditionalCheckFailedException", "TransactionCanceledException"}


@dataclass(eq=False)
class TaskStore:
    ddb: DynamoDBClient
    s3: S3Client
    _: KW_ONLY
    table: str
    bucket: str
    inline_limit: int = INLINE_LIMIT
    # told of each ledger entry a settle wrote (the ledger's day totals count it)
    ledgered: Callable[[Mapping[str, Any]], None] | None = field(default=None, init=False)

    # ------------------------------------------------------------------ payloads

    def _payload(
        self, item: TaskItem, name: str, value: Any, *, spill: bool = True
    ) -> dict[str, Any]:
        """`name` inline when small, else as an S3 object named in `<name>_key`."""
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
        size = len(text.encode())
        if size <= self.inline_limit:
            return {name: {"S": text}}
        if not spill:
            raise TaskTooLargeError(
                f"the {name} are {size} bytes as JSON; a task keeps at most "
                f"{self.inline_limit} bytes of them"
            )
        key = f"tasks/{item.owner}/{item.task_id}/{name}.json"
        self.s3.put_object(
            Bucket=self.bucket, Key=key, Body=text.encode(), ContentType="application/json"
        )
        return {f"{name}_key": {"S": key}}

    def _load(self, raw: Mapping[str, Any], name: str) -> Any:
        if name in raw:
            return json.loads(raw[name]["S"])
        if f"{name}_key" in raw:
            body = self.s3.get_object(Bucket=self.bucket, Key=raw[f"{name}_key"]["S"])["Body"]
            return json.loads(body.read())
        return None

    def _item(self, raw: Mapping[str, Any]) -> TaskItem:
        message = raw.get("status_message")
        return TaskItem(
            owner=raw["pk"]["S"][len(TASK_PREFIX) :],
            task_id=raw["sk"]["S"][2:],
            tool=raw["tool"]["S"],
            revision=int(raw["revision"]["N"]),
            version=raw["version"]["S"],
            arguments=self._load(raw, "arguments") or {},
            status=raw["status"]["S"],
            created_at=raw["created_at"]["S"],
            updated_at=raw["updated_at"]["S"],
            ttl_ms=int(raw["ttl_ms"]["N"]),
            poll_interval_ms=int(raw["poll_interval_ms"]["N"]),
            expires_at=float(raw["expires_at"]["N"]),
            lease_until=float(raw["lease_until"]["N"]),
            status_message=message["S"] if message else None,
            result=self._load(raw, "result"),
            error=self._load(raw, "error"),
            call=json.loads(raw["call"]["S"]) if "call" in raw else None,
            inputs=self._load(raw, "inputs"),
            answers=self._load(raw, "answers"),
            confirm=json.loads(raw["confirm"]["S"]) if "confirm" in raw else None,
            acts_for=json.loads(raw["acts_for"]["S"]) if "acts_for" in raw else None,
        )

    # ------------------------------------------------------------------ writes

    def create(self, item: TaskItem, *, max_running: int) -> None:
        """Store a new working task and count it; raises TaskLimitError at the owner's cap."""
        record = {
            **_key(item.owner, item.task_id),
            "tool": {"S": item.tool},
            "revision": _n(item.revision),
            "version": {"S": item.version},
            "status": {"S": item.status},
            "created_at": {"S": item.created_at},
            "updated_at": {"S": item.updated_at},
            "ttl_ms": _n(item.ttl_ms),
            "poll_interval_ms": _n(item.poll_interval_ms),
            "expires_at": _n(int(item.expires_at)),
            "lease_until": _n(item.lease_until),
            **self._payload(item, "arguments", dict(item.arguments), spill=False),
        }
        if item.call is not None:
            record["call"] = {"S": json.dumps(item.call, separators=(",", ":"))}
        if item.answers:
            record.update(self._payload(item, "answers", dict(item.answers), spill=False))
        if item.confirm is not None:
            record["confirm"] = {"S": json.dumps(item.confirm, separators=(",", ":"))}
        if item.acts_for is not None:
            record["acts_for"] = {"S": json.dumps(item.acts_for, separators=(",", ":"))}
        try:
            self.ddb.transact_write_items(
                TransactItems=[
                    {
                        "Update": {
                            "TableName": self.table,
                            "Key": _counter(item.owner),
                            "UpdateExpression": "SET running = if_not_exists(running, :z) + :one",
                            "ConditionExpression": (
                                "attribute_not_exists(running) OR running < :cap"
                            ),
                            "ExpressionAttributeValues": {
                                ":z": _n(0),
                                ":one": _n(1),
                                ":cap": _n(max_running),
                            },
                        }
                    },
                    {
                        "Put": {
                            "TableName": self.table,
                            "Item": record,
                            "ConditionExpression": "attribute_not_exists(pk)",
                        }
                    },
                ]
            )
        except ClientError as error:
            if _failed_condition(error):
                reasons = error.response.get("CancellationReasons") or []
                if reasons and reasons[0].get("Code") == "ConditionalCheckFailed":
                    raise TaskLimitError(
                        f"{max_running} of this caller's tasks are already running"
                    ) from error
            raise

    def settle(
        self,
        item: TaskItem,
        status: str,
        *,
        now: str,
        message: str | None = None,
        result: Mapping[str, Any] | None = None,
        error: Mapping[str, Any] | None = None,
        lease_seen: float | None = None,
        ledger: Mapping[str, Any] | None = None,
    ) -> bool:
        """Move a working task to a terminal status; False when it had already left `working`.

        `lease_seen` makes the move conditional on the lease not having been renewed since
        (how a reader fails a task whose worker stopped, without racing a live worker).
        `ledger` is the call's ledger item, written with the move or not at all.
        """
        move = self._settle_update(
            item,
            status,
            now=now,
            message=message,
            result=result,
            error=error,
            lease_seen=lease_seen,
        )
        try:
            self.ddb.transact_write_items(
                TransactItems=[
                    {"Update": move},
                    {
                        "Update": {
                            "TableName": self.table,
                            "Key": _counter(item.owner),
                            "UpdateExpression": "ADD running :minus",
                            "ExpressionAttributeValues": {":minus": _n(-1)},
                        }
                    },
                    *_ledger_put(self.table, ledger),
                ]
            )
        except ClientError as exc:
            if _failed_condition(exc):
                return False
            raise
        if ledger is not None and self.ledgered is not None:
            self.ledgered(ledger)
        return True

    def _settle_update(
        self,
        item: TaskItem,
        status: str,
        *,
        now: str,
        message: str | None,
        result: Mapping[str, Any] | None,
        error: Mapping[str, Any] | None,
        lease_seen: float | None,
    ) -> UpdateTypeDef:
        """The conditional update that moves a working task to `status` (see `settle`)."""
        names = {"#s": "status"}
        values: dict[str, Any] = {":w": {"S": "working"}, ":to": {"S": status}, ":now": {"S": now}}
        sets = ["#s = :to", "updated_at = :now"]
        if message is not None:
            sets.append("status_message = :msg")
            values[":msg"] = {"S": message}
        extra: dict[str, Any] = {}
        if result is not None:
            extra.update(self._payload(item, "result", dict(result)))
        if error is not None:
            extra.update(self._payload(item, "error", dict(error)))
        for index, (name, value) in enumerate(extra.items()):
            sets.append(f"#p{index} = :p{index}")  # `result` is a reserved word
            names[f"#p{index}"] = name
            values[f":p{index}"] = value
        condition = "#s IN (:w, :ir)"  # a task waiting for input still counts as running
        values[":ir"] = {"S": "input_required"}
        if lease_seen is not None:
            condition += " AND lease_until = :seen"
            values[":seen"] = _n(lease_seen)
        return {
            "TableName": self.table,
            "Key": _key(item.owner, item.task_id),
            "UpdateExpression": "SET " + ", ".join(sets),
            "ConditionExpression": condition,
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": values,
        }

    def park(
        self, item: TaskItem, inputs: Mapping[str, Any], answers: Mapping[str, Any], *, now: str
    ) -> bool:
        """A working task whose run asked: `input_required` with its questions and the answers
        so far; False when it had left `working` (cancelled meanwhile)."""
        return self._move(
            item, "working", "input_required", now=now, lease=item.expires_at,
            payloads={"inputs": dict(inputs), "answers": dict(answers)},
        )  # fmt: skip

    def answer(
        self,
        item: TaskItem,
        inputs: Mapping[str, Any],
        answers: Mapping[str, Any],
        *,
        now: str,
        lease_until: float,
    ) -> bool:
        """New answers for a task waiting for input: it stays `input_required` while `inputs`
        (the questions still open) has any, else it is `working` again (its run restarts).
        Conditional on nobody having changed it since it was read."""
        status = "input_required" if inputs else "working"
        lease = item.expires_at if inputs else lease_until
        return self._move(
            item, "input_required", status, now=now, lease=lease,
            payloads={"inputs": dict(inputs), "answers": dict(answers)}, seen=item.updated_at,
        )  # fmt: skip

    def _move(
        self,
        item: TaskItem,
        source: str,
        status: str,
        *,
        now: str,
        lease: float,
        payloads: Mapping[str, Any],
        seen: str | None = None,
    ) -> bool:
        names = {"#s": "status"}
        values: dict[str, Any] = {
            ":from": {"S": source}, ":to": {"S": status}, ":now": {"S": now}, ":lease": _n(lease),
        }  # fmt: skip
        sets = ["#s = :to", "updated_at = :now", "lease_until = :lease"]
        for index, (name, value) in enumerate(payloads.items()):
            stored = self._payload(item, name, value)
            ((attribute, encoded),) = stored.items()
            sets.append(f"#q{index} = :q{index}")
            names[f"#q{index}"] = attribute
            values[f":q{index}"] = encoded
        condition = "#s = :from"
        if seen is not None:
            condition += " AND updated_at = :seen"
            values[":seen"] = {"S": seen}
        try:
            self.ddb.update_item(
                TableName=self.table,
                Key=_key(item.owner, item.task_id),
                UpdateExpression="SET " + ", ".join(sets),
                ConditionExpression=condition,
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=values,
            )
        except ClientError as exc:
            if _failed_condition(exc):
                return False
            raise
        return True

    def note(self, item: TaskItem, message: str, *, now: str) -> bool:
        """A working task's status message (its run's progress), which is a change of the task:
        `updated_at` (its `lastUpdatedAt`) moves with it. False once it is not working."""
        values = {":m": {"S": message}, ":now": {"S": now}}
        return self._while_working(item, "SET status_message = :m, updated_at = :now", values)

    def renew(self, item: TaskItem, *, lease_until: float) -> bool:
        """Extend a working task's lease; False when it is no longer working (cancelled)."""
        return self._while_working(item, "SET lease_until = :lease", {":lease": _n(lease_until)})

    def _while_working(self, item: TaskItem, update: str, values: dict[str, Any]) -> bool:
        """Apply `update` to the task if it is still working; False once it is not."""
        try:
            self.ddb.update_item(
                TableName=self.table,
                Key=_key(item.owner, item.task_id),
                UpdateExpression=update,
                ConditionExpression="#s = :w",
                ExpressionAttributeNames={"#s": "status"},
                ExpressionAttributeValues={**values, ":w": {"S": "working"}},
            )
        except ClientError as exc:
            if _failed_condition(exc):
                return False
            raise
        return True

    # ------------------------------------------------------------------ reads

    def get(self, owner: str, task_id: str) -> TaskItem | None:
        """The owner's task, or None when it does not exist or has expired."""
        raw = self.ddb.get_item(
            TableName=self.table, Key=_key(owner, task_id), ConsistentRead=True
        ).get("Item")
        if raw is None or float(raw["expires_at"]["N"]) <= time.time():
            return None
        return self._item(raw)

    def page(
        self, owner: str, start: str | None, *, limit: int = 50
    ) -> tuple[list[TaskItem], str | None]:
        """One page of the owner's unexpired tasks and the id to continue after."""
        kwargs: dict[str, Any] = {
            "TableName": self.table,
            "KeyConditionExpression": "pk = :pk AND begins_with(sk, :t)",
            "ExpressionAttributeValues": {":pk": {"S": TASK_PREFIX + owner}, ":t": {"S": "T#"}},
            "Limit": limit,
            "ConsistentRead": True,
        }
        if start is not None:
            kwargs["ExclusiveStartKey"] = _key(owner, start)
        answer = self.ddb.query(**kwargs)
        now = time.time()
        items = [self._item(raw) for raw in answer.get("Items", [])]
        last = answer.get("LastEvaluatedKey")
        after = last["sk"]["S"][2:] if last else None
        return [i for i in items if i.expires_at > now], after

    def running(self, owner: str) -> int:
        raw = self.ddb.get_item(TableName=self.table, Key=_counter(owner), ConsistentRead=True).get(
            "Item"
        )
        return int(raw["running"]["N"]) if raw and "running" in raw else 0
