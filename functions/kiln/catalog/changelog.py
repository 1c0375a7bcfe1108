"""The catalog's change log: which tools each version changed, so a process reads only those.

Every catalog write (a tool's or a view's) is one transaction that sets `CATALOG|VERSION` to
the next number, on condition that it still holds the number the writer read just before,
and puts `CATALOG#CHANGES|<number>` naming the tools the write touched (none for a view), and
the bundle records it touched: a bundle turning ready, or leaving ready for a rebuild, changes
the fingerprint its tools are served with (catalog/README.md, fingerprints), so that write is
a catalog write too (kiln.bundles.store).
Two writers that read the same number cannot both commit: the second one's condition fails
and it reads the number again (`version_raced`), so the entries are exactly 1, 2, 3, ...

A process whose snapshot is at version v and reads w > v asks for the entries v+1..w (one
Query of a few hundred bytes: one read unit) and re-reads only the tools they name (one
GetItem each), instead of the whole `TOOLS` partition (34 units for 100 tools). It reads the
whole catalog again only when an entry is missing (a write made before this log, or by an
older Kiln, or expired: entries live `KEEP_S`), when it fell more than `MAX_STEPS` versions
behind, or when more than `MAX_TOOLS` tools changed: the forward read is then no cheaper.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, cast

from botocore.exceptions import ClientError

from kiln.catalog.errors import CatalogBusyError
from kiln.catalog.packages import BUNDLE_PREFIX

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_dynamodb.type_defs import TransactWriteItemTypeDef

CHANGES_PK = "CATALOG#CHANGES"
MAX_STEPS = 64  # versions a process reads forward; further behind, it reads everything
MAX_TOOLS = 24  # changed tools it re-reads one by one; more, it reads everything
KEEP_S = 24 * 3600  # an entry's life (the table's TTL attribute `expires_at`)
VERSION_KEY = {"pk": {"S": "CATALOG"}, "sk": {"S": "VERSION"}}


class Changes(NamedTuple):
    """What versions have+1..now changed: tool ids, and bundle ids whose readiness moved."""

    tools: set[str]
    bundles: set[str]


COMMIT_ATTEMPTS = 8  # a write that loses the version step this often in a row is refused
BACKOFF_S = (0.02, 0.5)  # the first wait's bound, and the most any wait may be


def entry_key(version: int) -> str:
    return f"{version:012d}"


def read_version(ddb: DynamoDBClient, table: str) -> int:
    """The catalog's version number: one strongly consistent read."""
    item = ddb.get_item(TableName=table, Key=VERSION_KEY, ConsistentRead=True).get("Item")
    return int(item["version"]["N"]) if item else 0


def touched_tools(operations: list[dict[str, Any]]) -> list[str]:
    """The ids of the `TOOLS` items a transaction's operations write."""
    ids: set[str] = set()
    for operation in operations:
        ((_, part),) = operation.items()
        key = part.get("Key") or part.get("Item") or {}
        if key.get("pk") == {"S": "TOOLS"}:
            ids.add(key["sk"]["S"])
    return sorted(ids)


def touched_bundles(operations: list[dict[str, Any]]) -> list[str]:
    """The ids of the bundle records a transaction's operations write."""
    ids: set[str] = set()
    for operation in operations:
        ((_, part),) = operation.items()
        pk = (part.get("Key") or part.get("Item") or {}).get("pk", {}).get("S", "")
        if pk.startswith(BUNDLE_PREFIX):
            ids.add(pk[len(BUNDLE_PREFIX) :])
    return sorted(ids)


def next_version(
    ddb: DynamoDBClient, table: str, tools: list[str], bundles: Sequence[str] = ()
) -> list[dict[str, Any]]:
    """The two operations every catalog write ends with: the version step and its entry."""
    current = read_version(ddb, table)
    entry: dict[str, Any] = {
        "pk": {"S": CHANGES_PK},
        "sk": {"S": entry_key(current + 1)},
        "expires_at": {"N": str(int(time.time()) + KEEP_S)},
    }
    if tools:
        entry["tools"] = {"SS": tools}
    if bundles:
        entry["bundles"] = {"SS": list(bundles)}
    step = {
        "Update": {
            "TableName": table,
            "Key": VERSION_KEY,
            "UpdateExpression": "SET version = :next",
            "ConditionExpression": "attribute_not_exists(version) OR version = :current",
            "ExpressionAttributeValues": {
                ":next": {"N": str(current + 1)},
                ":current": {"N": str(current)},
            },
        }
    }
    return [step, {"Put": {"TableName": table, "Item": entry}}]


def version_raced(error: Any, at: int) -> bool:
    """Whether a cancelled transaction failed only on its version step (operation `at`).

    That reason is rewritten as `TransactionConflict`, what DynamoDB answers two writes of
    one item at once, so callers that look for `ConditionalCheckFailed` see only their own.
    """
    reasons = error.response.get("CancellationReasons") or []
    if len(reasons) <= at or reasons[at].get("Code") != "ConditionalCheckFailed":
        return False
    reasons[at] = {**reasons[at], "Code": "TransactionConflict"}
    return all(r.get("Code") in (None, "None") for r in reasons[:at])


def changed_since(ddb: DynamoDBClient, table: str, have: int, now: int) -> Changes | None:
    """The tools and bundles changed by versions have+1..now; None when a full read is needed."""
    if not 0 < now - have <= MAX_STEPS:
        return None
    page = ddb.query(
        TableName=table,
        KeyConditionExpression="pk = :pk AND sk BETWEEN :low AND :high",
        ExpressionAttributeValues={
            ":pk": {"S": CHANGES_PK},
            ":low": {"S": entry_key(have + 1)},
            ":high": {"S": entry_key(now)},
        },
        ConsistentRead=True,
    )
    items = page.get("Items", [])
    if len(items) != now - have or page.get("LastEvaluatedKey"):
        return None
    tools = {tool for item in items for tool in item.get("tools", {}).get("SS", [])}
    bundles = {bundle for item in items for bundle in item.get("bundles", {}).get("SS", [])}
    return Changes(tools, bundles) if len(tools) + len(bundles) <= MAX_TOOLS else None


def cancel_codes(error: ClientError) -> list[str]:
    """The reason code of each operation of a cancelled transaction ("None": it was fine)."""
    reasons = error.response.get("CancellationReasons") or []
    return [reason.get("Code", "None") for reason in reasons]


def commit(ddb: DynamoDBClient, table: str, operations: list[dict[str, Any]]) -> None:
    """Write `operations` in one transaction with the version step and its entry.

    Two writes at the same moment collide on the version item even when both are valid: the
    loser reads the version again and retries, waiting a random time that doubles each round
    (full jitter, so a crowd of writers spreads out instead of colliding again in step).
    Raises the ClientError of a refusal by the operations' own conditions (its reasons then
    name only those: the version step's is rewritten, `version_raced`), and CatalogBusyError
    when the version was taken every time, which the caller answers as a conflict to retry.
    """
    first, most = BACKOFF_S
    for attempt in range(COMMIT_ATTEMPTS):
        steps = next_version(ddb, table, touched_tools(operations), touched_bundles(operations))
        try:
            # A token per attempt: botocore resends it when a reply is lost, and the store then
            # answers with the first call's success instead of applying the write twice or
            # refusing it as a conflict with itself.
            # the stores build their operations as plain dicts (pk/sk items of many kinds)
            items = cast("list[TransactWriteItemTypeDef]", [*operations, *steps])
            ddb.transact_write_items(TransactItems=items, ClientRequestToken=uuid.uuid4().hex)
            return
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") != "TransactionCanceledException":
                raise
            version_raced(error, len(operations))
            codes = cancel_codes(error)
            if "ConditionalCheckFailed" in codes or "TransactionConflict" not in codes:
                raise
        if attempt + 1 < COMMIT_ATTEMPTS:
            time.sleep(random.uniform(0, min(most, first * 2**attempt)))
    raise CatalogBusyError(
        f"the catalog: {COMMIT_ATTEMPTS} other writes came at the same moment as this one, "
        "each time; nothing was changed, send it again",
        retry_after_s=1,
    )
