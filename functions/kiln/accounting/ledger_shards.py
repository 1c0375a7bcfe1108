"""How many shards each UTC day of the call ledger was written over: a reader reads those.

| pk                 | sk       | what                                                      |
| ------------------ | -------- | --------------------------------------------------------- |
| `LEDGERSUM#<day>`  | `SHARDS` | `shards`: the most shards a process wrote that day over   |
| `LEDGERSUM#SHARDS` | `SINCE`  | `day`: the first day whose writers all record their count |

A day's entries (and its totals) are spread over `KILN_LEDGER_SHARDS` partitions for
DynamoDB's per-partition write limit, and a reader queries each of them: 32 queries for a
page of the newest calls or a day's totals, 31 x 32 for a 30-day chart. Where no partition
limit applies (the local emulator) one shard is enough, but a reader cannot know from its own
setting how many shards the writers of a day used. So before a process writes its first entry
of a day it records its shard count in that day's item (an update that only ever raises it:
one write per process and day), and a reader reads the day's item first, then exactly
`shards` partitions, or none when the day has no item (nothing was written that day). The
count may therefore be lowered as well as raised: a day is read over the most any of its
writers used.

Days written before this record existed have no item. The `SINCE` item says from which day
on every writer records: a table made by `ensure_resources` records from the start
(`since_start`); on any other table the first writer that finds no `SINCE` writes
tomorrow's date (its own entries of today may sit beside an earlier version's). A reader
reads a day before `SINCE`, or any day while there is no `SINCE`, over the larger of its own
count and 32 (the count every earlier version used by default), as readers always did.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import KW_ONLY, dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

FORMER_SHARDS = 32  # what a day written before the record existed is read over (at least)
SINCE_PK = "LEDGERSUM#SHARDS"
FROM_START = "0000-00-00"  # SINCE of a table that had the record from its creation


def since_start() -> dict[str, Any]:
    """The SINCE item of a table that records from its first day (`ensure_resources` writes
    it, as kiln.aws.clients.LEDGER_SHARDS_SINCE_START, into every table it makes)."""
    return {"pk": {"S": SINCE_PK}, "sk": {"S": "SINCE"}, "day": {"S": FROM_START}}


def _conditional(error: ClientError) -> bool:
    return error.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException"


@dataclass(eq=False)
class DayShards:
    """This process's shard count, recorded for the days it writes, and the days' counts."""

    db: DynamoDBClient
    _: KW_ONLY
    table: str
    shards: int
    retention_s: int
    clock: Callable[[], float] = time.time
    # the days this process has recorded its count for; SINCE once seen (it never changes once
    # written)
    _recorded: set[str] = field(default_factory=set, init=False)
    _since: str | None = field(default=None, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)

    def record(self, day: str) -> None:
        """Before this process writes its first entry of `day` (yyyy-mm-dd): say that the day
        is written over (at least) this process's shard count."""
        if day in self._recorded:
            return
        if self._since is None:
            self._write_since()
        expires = int(self.clock()) + self.retention_s + 2 * 86_400
        try:
            self.db.update_item(
                TableName=self.table,
                Key={"pk": {"S": f"LEDGERSUM#{day}"}, "sk": {"S": "SHARDS"}},
                UpdateExpression="SET shards = :n, expires_at = :e",
                ConditionExpression="attribute_not_exists(shards) OR shards < :n",
                ExpressionAttributeValues={":n": {"N": str(self.shards)},
                                           ":e": {"N": str(expires)}},
            )  # fmt: skip
        except ClientError as error:
            if not _conditional(error):  # another process recorded as many or more
                raise
        with self._lock:
            if len(self._recorded) > 8:  # the days written lately are enough to remember
                self._recorded.clear()
            self._recorded.add(day)

    def of(self, day: date | str) -> int:
        """How many shards a reader reads for `day`: 0 when nothing was written that day."""
        day = day if isinstance(day, str) else day.isoformat()
        since = self._since or self._read_since()
        if since is None or day < since:
            return max(self.shards, FORMER_SHARDS)
        found = self.db.get_item(
            TableName=self.table,
            Key={"pk": {"S": f"LEDGERSUM#{day}"}, "sk": {"S": "SHARDS"}},
            ConsistentRead=True,
        ).get("Item")
        return int(found["shards"]["N"]) if found else 0

    def of_days(self, days: list[str]) -> dict[str, int]:
        """`of` for many days (a chart's), read with BatchGetItem: one request per 100 days."""
        since = self._since or self._read_since()
        counts = {day: max(self.shards, FORMER_SHARDS) for day in days
                  if since is None or day < since}  # fmt: skip
        keys = [{"pk": {"S": f"LEDGERSUM#{day}"}, "sk": {"S": "SHARDS"}}
                for day in days if day not in counts]  # fmt: skip
        counts.update({str(key["pk"]["S"]).partition("#")[2]: 0 for key in keys})
        while keys:
            asked, keys = keys[:100], keys[100:]
            request: Mapping[str, Any] = {self.table: {"Keys": asked, "ConsistentRead": True}}
            while request:
                answer = self.db.batch_get_item(RequestItems=request)
                for found in answer.get("Responses", {}).get(self.table, []):
                    counts[str(found["pk"]["S"]).partition("#")[2]] = int(found["shards"]["N"])
                request = answer.get("UnprocessedKeys") or {}
        return counts

    def _read_since(self) -> str | None:
        found = self.db.get_item(
            TableName=self.table,
            Key={"pk": {"S": SINCE_PK}, "sk": {"S": "SINCE"}},
            ConsistentRead=True,
        ).get("Item")
        if found is not None:
            self._since = str(found["day"]["S"])
        return self._since

    def _write_since(self) -> None:
        if self._read_since() is not None:
            return
        tomorrow = datetime.fromtimestamp(self.clock(), UTC).date() + timedelta(days=1)
        item = {"pk": {"S": SINCE_PK}, "sk": {"S": "SINCE"}, "day": {"S": tomorrow.isoformat()}}
        try:
            self.db.put_item(
                TableName=self.table, Item=item, ConditionExpression="attribute_not_exists(pk)"
            )
        except ClientError as error:
            if not _conditional(error):
                raise
        self._read_since()


class DaysBack:
    """The shard counts of days a query reads newest first, back to `first`: the first day's
    by itself, then those of the next 1, 2, 4, ... days at once. A query that fills its page
    on its first day reads one count; one that goes back through a month of days without
    calls reads their counts in six requests, not thirty."""

    def __init__(self, shards: DayShards, first: date) -> None:
        self._shards = shards
        self._first = first
        self._known: dict[str, int] = {}
        self._ahead = 1

    def __call__(self, day: date) -> int:
        if day.isoformat() not in self._known:
            if not self._known:
                self._known[day.isoformat()] = self._shards.of(day)
            else:
                days = [day - timedelta(days=n) for n in range(self._ahead)]
                asked = [d.isoformat() for d in days if d >= self._first] or [day.isoformat()]
                self._known.update(self._shards.of_days(asked))
                self._ahead *= 2
        return self._known[day.isoformat()]
