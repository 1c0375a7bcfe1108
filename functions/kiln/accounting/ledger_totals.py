"""The call ledger's day totals: counted in each container, flushed as one write per interval.

| pk                             | sk                      | what                             |
| ------------------------------ | ----------------------- | -------------------------------- |
| `LEDGERSUM#<yyyy-mm-dd>#<shard>` | `<container>#<chunk>#<n>` | that container's counts of the |
|                                |                         | day so far (`<dim>|<name>|<n>`)  |

The entries (kiln.accounting.ledger) are the source of truth; the totals are a convenience that
must not cost a write per call nor be one item every call writes. So each process (a Lambda
container, `kiln dev`) adds the entries it writes to counts in memory, and writes its counts
of the day (cumulative, an overwrite: a lost or repeated write double-counts nothing) at most
once per `flush_s`, with the write of the first entry after that time has passed. A
process's counts are split over `CHUNKS` items by the hash of the caller's or tool's name, so
an item stays small whatever the number of callers (a flush rewrites only the chunks that
changed: usually 3, the day's `all`, the caller and the tool) and never nears DynamoDB's
400 KB item limit. Each tool's counts per UTC hour (dim `hour`, name `<HH>|<tool>`) are kept
too, in one more item per hour (chunk `CHUNKS + HH`): a flush in a busy hour rewrites that
hour's item only (then usually 4 items), and a reader sums any window of whole hours from the
totals of the days it spans, at the same cost as the days' totals. A process's items are
in the shard its id hashes to, so the writes of a day's totals spread over `shards`
partitions like its entries. Reading a day's totals is one query per shard the day was
written over (kiln.accounting.ledger_shards; the day's items
of every process that wrote that day), summed, plus this process's counts not yet written.

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

CHUNKS = 16  # items a process's counts of one day are split over (and one item per hour)
DEFAULT_FLUSH_S = 10.0
_KEYS = frozenset({"pk", "sk", "expires_at"})

Counts = dict[str, float]  # attribute (`all|calls`, `tool|echo|ok`, ...) -> amount


def _attribute(dim: str, name: str, field: str) -> str:
    return f"{dim}|{name}|{field}" if name else f"{dim}|{field}"


def _chunk(dim: str, name: str) -> int:
    return zlib.crc32(f"{dim}|{name}".encode("utf-8", "surrogatepass")) % CHUNKS


def counts_of(item: Mapping[str, Any]) -> list[tuple[int, str, float]]:
    """(chunk, attribute, amount) that one ledger entry adds to its day's totals: the day's
    `all`, its caller's and its tool's counts, and its tool's counts of its UTC hour (dim
    `hour`, name `<HH>|<tool>`, in the hour's own chunk `CHUNKS + HH`)."""
    fields = {"calls": 1.0, item["outcome"]["S"]: 1.0, "run_ms": float(item["duration_ms"]["N"])}
    tool = item["tool"]["S"]
    hour = str(item["at"]["S"])[11:13]
    added = []
    for dim, name, chunk in (
        ("all", "", _chunk("all", "")),
        ("caller", item["caller"]["S"], _chunk("caller", item["caller"]["S"])),
        ("tool", tool, _chunk("tool", tool)),
        ("hour", f"{hour}|{tool}", CHUNKS + int(hour)),
    ):
        added += [(chunk, _attribute(dim, name, field), amount) for field, amount in fields.items()]
    return added


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
        # (day, chunk) -> (its item's sk, the counts written there), and counts not written yet
        self._written: dict[tuple[str, int], tuple[str, Counts]] = {}
        self._pending: dict[tuple[str, int], Counts] = defaultdict(dict)
        self._last_flush = clock()

    def add(self, item: Mapping[str, Any]) -> None:
        """Count one written entry (the item as `CallLedger.item` made it)."""
        day = str(item["at"]["S"])[:10]
        with self._lock:
            for chunk, attribute, amount in counts_of(item):
                counts = self._pending[(day, chunk)]
                counts[attribute] = counts.get(attribute, 0.0) + amount

    def due(self) -> bool:
        with self._lock:
            waiting = bool(self._pending)
        return waiting and self._clock() - self._last_flush >= self.flush_s

    def flush(self) -> None:
        """Write every chunk with counts not written yet (each an overwrite of this process's
        item for it: its counts of the day so far)."""
        with self._flushing:
            with self._lock:
                moving, self._pending = self._pending, defaultdict(dict)
                self._last_flush = self._clock()
            try:
                for (day, chunk), counts in sorted(moving.items()):
                    sk, written = self._written.get((day, chunk)) or (self._sk(chunk), {})
                    total = dict(written)
                    for attribute, amount in counts.items():
                        total[attribute] = total.get(attribute, 0.0) + amount
                    self._put(day, sk, total)
                    self._written[(day, chunk)] = (sk, total)
                    del moving[(day, chunk)]
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

    def _sk(self, chunk: int) -> str:
        return f"{self.container}#{chunk:02d}#{secrets.token_hex(3)}"

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
            for day, chunk in [key for key in self._written if key[0] not in days[-2:]]:
                del self._written[(day, chunk)]
