"""The call ledger's day totals: counted in each container, flushed as one write per interval.

| pk                             | sk                      | what                             |
| ------------------------------ | ----------------------- | -------------------------------- |
| `LEDGERSUM#<yyyy-mm-dd>#<shard>` | `<container>#<item>#<n>`  | that container's counts of the |
|                                |                         | day so far (`<dim>|<name>|<n>`)  |

The entries (kiln.accounting.ledger) are the source of truth; the totals are a convenience that
must not cost a write per call nor be one item every call writes. So each process (a Lambda
container, `kiln dev`) adds the entries it writes to counts in memory, and writes its counts
of the day (cumulative, an overwrite: a lost or repeated write double-counts nothing) at most
once per `flush_s`, with the write of the first entry after that time has passed. Each entry
counts in the day's `all`, its caller's and its tool's counts, and its tool's counts of its UTC
hour (dim `hour`, name `<HH>|<tool>`), so that a reader sums any window of whole hours from the
totals of the days it spans, at the same cost as the days' totals.

A process packs its counts of a day into as few items as fit: each attribute gets a place in
the process's current item of the day the first time it is counted, and keeps it; an item
is closed when one more attribute could take it past 1 KB (`ITEM_BYTES`, DynamoDB's write
unit), so a flush rewrites only the items whose counts changed, each for one write unit, and
no item nears DynamoDB's 400 KB limit whatever the number of callers and tools. A container
serving one tool to one caller writes one item per flush (it wrote four, one per dimension's
hash chunk and one for the hour, until 2026-12-04: 0.15 write units a call at 2 calls a
second, $0.09 a million). Readers sum every item of the day whatever its sort key. A
process's items are in the shard its id hashes to, so the writes of a day's totals spread
over `shards` partitions like its entries. Reading a day's totals is one query per shard the
day was written over (kiln.accounting.ledger_shards; the day's items of every process that
wrote that day), summed, plus this process's counts not yet written.

Staleness and loss: another process sees a process's calls at most `flush_s` after they were
made while it keeps answering calls; an idle process's last calls (made within `flush_s`
of its last write) reach the totals with its next call, or never if it is stopped first
(a Lambda container retired or killed, `kiln dev` killed). That loses at most `flush_s` of
one process's calls from the totals, never an entry: the entries are written before the
answer (Lambda) and are the record.
"""

from __future__ import annotations

import secrets
import threading
import time
import zlib
from collections import defaultdict
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

ITEM_BYTES = 1024  # one write unit: a process's item of counts stays within it
# What an item's keys and expiry take (pk, a sort key of the container's id, expires_at), and
# what one count's value may (a DynamoDB number is at most 21 bytes): conservative bounds.
_ITEM_KEYS_BYTES = 160
_NUMBER_BYTES = 21
DEFAULT_FLUSH_S = 10.0
_KEYS = frozenset({"pk", "sk", "expires_at"})

Counts = dict[str, float]  # attribute (`all|calls`, `tool|echo|ok`, ...) -> amount


def _attribute(dim: str, name: str, field: str) -> str:
    return f"{dim}|{name}|{field}" if name else f"{dim}|{field}"


def counts_of(item: Mapping[str, Any]) -> list[tuple[str, float]]:
    """(attribute, amount) that one ledger entry adds to its day's totals: the day's `all`,
    its caller's and its tool's counts, and its tool's counts of its UTC hour (dim `hour`,
    name `<HH>|<tool>`)."""
    fields = {"calls": 1.0, item["outcome"]["S"]: 1.0, "run_ms": float(item["duration_ms"]["N"])}
    tool = item["tool"]["S"]
    hour = str(item["at"]["S"])[11:13]
    dims = (
        ("all", ""),
        ("caller", item["caller"]["S"]),
        ("tool", tool),
        ("hour", f"{hour}|{tool}"),
    )
    return [
        (_attribute(dim, name, field), amount)
        for dim, name in dims
        for field, amount in fields.items()
    ]


def _bytes(attribute: str) -> int:
    return len(attribute.encode("utf-8", "surrogatepass")) + _NUMBER_BYTES


class _Places:
    """Which of a process's items of one day each attribute is written in (it keeps it)."""

    def __init__(self) -> None:
        self.of: dict[str, int] = {}
        self._room = 0  # bytes left in the current item
        self._current = -1

    def place(self, attribute: str) -> int:
        found = self.of.get(attribute)
        if found is None:
            size = _bytes(attribute)
            if size > self._room:
                self._current += 1
                self._room = ITEM_BYTES - _ITEM_KEYS_BYTES
            self._room -= size
            found = self.of[attribute] = self._current
        return found


def _number(value: float) -> dict[str, str]:
    return {"N": str(int(value)) if float(value).is_integer() else f"{value:.3f}"}


class DayTotals:
    """One process's counts of the days it wrote entries for, and the reading of totals."""

    def __init__(
        self,
        dynamodb: DynamoDBClient,
        *,
        table: str,
        shards: int,
        container: str,
        flush_s: float = DEFAULT_FLUSH_S,
        retention_s: int = 30 * 86_400,
        clock: Callable[[], float] = time.time,
        shards_of: Callable[[str], int] | None = None,
    ) -> None:
        self._db = dynamodb
        self._table = table
        self.shards = shards
        # how many shards a day's items are in (kiln.accounting.ledger_shards); else all of them
        self._shards_of = shards_of or (lambda day: shards)
        self.container = container
        self._shard = zlib.crc32(container.encode()) % shards
        self.flush_s = flush_s
        self._retention_s = retention_s
        self._clock = clock
        self._lock = threading.Lock()  # the counts
        self._flushing = threading.Lock()  # one flush at a time; readers wait for it
        # (day, item) -> (its sk, the counts written there), and counts not written yet
        self._written: dict[tuple[str, int], tuple[str, Counts]] = {}
        self._places: dict[str, _Places] = defaultdict(_Places)
        self._pending: dict[tuple[str, int], Counts] = defaultdict(dict)
        self._last_flush = clock()

    def add(self, item: Mapping[str, Any]) -> None:
        """Count one written entry (the item as `CallLedger.item` made it)."""
        day = str(item["at"]["S"])[:10]
        with self._lock:
            places = self._places[day]
            for attribute, amount in counts_of(item):
                counts = self._pending[(day, places.place(attribute))]
                counts[attribute] = counts.get(attribute, 0.0) + amount

    def due(self) -> bool:
        with self._lock:
            waiting = bool(self._pending)
        return waiting and self._clock() - self._last_flush >= self.flush_s

    def flush(self) -> None:
        """Write every item with counts not written yet (each an overwrite of this process's
        item: its counts of the day so far)."""
        with self._flushing:
            with self._lock:
                moving, self._pending = self._pending, defaultdict(dict)
                self._last_flush = self._clock()
            try:
                for (day, place), counts in sorted(moving.items()):
                    sk, written = self._written.get((day, place)) or (self._sk(place), {})
                    total = dict(written)
                    for attribute, amount in counts.items():
                        total[attribute] = total.get(attribute, 0.0) + amount
                    self._put(day, sk, total)
                    self._written[(day, place)] = (sk, total)
                    del moving[(day, place)]
            finally:
                with self._lock:  # what was not written waits for the next flush
                    for key, counts in moving.items():
                        pending = self._pending[key]
                        for attribute, amount in counts.items():
                            pending[attribute] = pending.get(attribute, 0.0) + amount
            self._forget_old_days()

    def read(self, day: str) -> Counts:
        """A day's totals: every process's written counts, plus this process's unwritten."""
        summed: Counts = {}
        with self._flushing:  # not while this process's own counts are half written
            for shard in range(self._shards_of(day)):
                for item in self._items(day, shard):
                    for attribute, value in item.items():
                        if attribute not in _KEYS and "N" in value:
                            summed[attribute] = summed.get(attribute, 0.0) + float(value["N"])
            with self._lock:
                for (pending_day, _), counts in self._pending.items():
                    if pending_day == day:
                        for attribute, amount in counts.items():
                            summed[attribute] = summed.get(attribute, 0.0) + amount
        return summed

    # -- internals ---------------------------------------------------------------------

    def _sk(self, place: int) -> str:
        return f"{self.container}#{place:02d}#{secrets.token_hex(3)}"

    def _put(self, day: str, sk: str, counts: Counts) -> None:
        item: dict[str, Any] = {
            "pk": {"S": f"LEDGERSUM#{day}#{self._shard}"},
            "sk": {"S": sk},
            "expires_at": {"N": str(int(self._clock()) + self._retention_s)},
        }
        item.update({attribute: _number(amount) for attribute, amount in counts.items()})
        self._db.put_item(TableName=self._table, Item=item)

    def _items(self, day: str, shard: int) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        start: Mapping[str, Any] | None = None
        while True:
            kwargs: dict[str, Any] = {
                "TableName": self._table,
                "KeyConditionExpression": "pk = :pk",
                "ExpressionAttributeValues": {":pk": {"S": f"LEDGERSUM#{day}#{shard}"}},
            }
            if start is not None:
                kwargs["ExclusiveStartKey"] = dict(start)
            page = self._db.query(**kwargs)
            items += page.get("Items", [])
            start = page.get("LastEvaluatedKey")
            if start is None:
                return items

    def _forget_old_days(self) -> None:
        """Drop the written counts of all but the last two days written (a late task's entry
        of an older day starts a new item of this process for it, summed alike)."""
        with self._lock:
            days = sorted({day for day, _ in self._written})
            for day, place in [key for key in self._written if key[0] not in days[-2:]]:
                del self._written[(day, place)]
            for day in [day for day in self._places if day not in days[-2:]]:
                if not any(key[0] == day for key in self._pending):
                    del self._places[day]
