"""DynamoDB's per-partition throughput limits, as the emulator applies them (off by default).

DynamoDB serves at most 3,000 read units and 1,000 write units a second from one partition,
and one item (one partition key, here) never splits over several: past that it answers
`ProvisionedThroughputExceededException`, on-demand tables included. With
`--partition-limits READS/WRITES` (units per second and partition key, e.g. `3000/1000`) the
emulator counts each request's units per partition key over the current second and refuses
one that would pass a limit with DynamoDB's own error. Units as DynamoDB rounds them: a read
is one unit per 4 KB returned (half for an eventually consistent one, at least one request's
worth), a write one per 1 KB sent, a transaction's items twice. Writes are counted before
they are applied (a refused write changes nothing), reads after (by what they return).

Scaled time, for a benchmark that cannot offer AWS's rates (bench/throughput): limits
divided by a factor F and counted over a window of several seconds (`--partition-window S`:
each partition may spend its per-second limit times S in each S-second window), so that a
rate F times smaller meets the same limits without rounding a partition's few units a second
to all or nothing. `--throughput-log FILE` appends a JSON line for each refusal and, as each
window closes, the window's busiest partitions (units spent per kind), for the benchmark to
read.
"""

from __future__ import annotations

import json
import math
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

THROTTLED = "ProvisionedThroughputExceededException"
_READS = frozenset({"GetItem", "Query", "BatchGetItem", "TransactGetItems", "Scan"})


def parse_limits(text: str) -> tuple[float, float]:
    """`READS/WRITES` units per second and partition, e.g. `3000/1000`."""
    reads, _, writes = text.partition("/")
    try:
        limits = (float(reads), float(writes))
    except ValueError:
        raise ValueError(
            f"partition limits: expected READS/WRITES, e.g. 3000/1000, got {text!r}"
        ) from None
    if min(limits) <= 0:
        raise ValueError("partition limits: both must be positive")
    return limits


def _pk(key: dict[str, Any] | None) -> str | None:
    value = (key or {}).get("pk")
    return str(next(iter(value.values()))) if isinstance(value, dict) and value else None


def _query_pk(body: dict[str, Any]) -> str | None:
    names = body.get("ExpressionAttributeNames", {})
    values = body.get("ExpressionAttributeValues", {})
    for left, right in re.findall(r"([#\w]+)\s*=\s*(:\w+)", body.get("KeyConditionExpression", "")):
        if names.get(left, left) == "pk" and right in values:
            return _pk({"pk": values[right]})
    return None


def write_charges(operation: str, body: dict[str, Any], size: int) -> list[tuple[str, float]]:
    """(partition key, write units) of a write request, before it is applied."""
    if operation in ("PutItem", "UpdateItem", "DeleteItem"):
        pk = _pk(body.get("Key") or body.get("Item"))
        return [(pk, float(max(1, math.ceil(size / 1024))))] if pk else []
    charges = []
    if operation == "TransactWriteItems":
        for item in body.get("TransactItems", []):
            ((_, part),) = item.items()
            pk = _pk(part.get("Key") or part.get("Item"))
            bytes_ = len(json.dumps(part))
            if pk:
                charges.append((pk, 2.0 * max(1, math.ceil(bytes_ / 1024))))
    elif operation == "BatchWriteItem":
        for requests in body.get("RequestItems", {}).values():
            for request in requests:
                ((_, part),) = request.items()
                pk = _pk(part.get("Item") or part.get("Key"))
                if pk:
                    charges.append((pk, float(max(1, math.ceil(len(json.dumps(part)) / 1024)))))
    return charges


def read_charge(operation: str, body: dict[str, Any], returned: int) -> tuple[str, float] | None:
    """(partition key, read units) of a single-partition read, from the bytes it returned."""
    if operation == "GetItem":
        pk = _pk(body.get("Key"))
    elif operation == "Query":
        pk = _query_pk(body)
    else:
        return None
    if pk is None:
        return None
    per_unit = 1.0 if body.get("ConsistentRead") else 0.5
    return pk, per_unit * max(1, math.ceil(returned / 4096))


@dataclass
class PartitionLimits:
    """Units spent per (table, partition key, kind) in the current second."""

    read_units: float
    write_units: float
    clock: Callable[[], float] = time.time
    window_s: float = 1.0  # each partition spends at most its limit times this per window
    log: Path | None = None  # --throughput-log: refusals and each window's busiest partitions
    _spent: dict[tuple[str, str, str], tuple[int, float]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _window: int = -1
    throttled: dict[str, int] = field(default_factory=dict)  # partition key -> refusals

    def take(self, table: str, charges: list[tuple[str, float]], kind: str) -> str | None:
        """Spend every charge, or none: the first partition key that would pass its limit."""
        limit = (self.read_units if kind == "read" else self.write_units) * self.window_s
        second = int(self.clock() / self.window_s)
        with self._lock:
            if second != self._window:
                self._close_window(second)
            totals: dict[str, float] = {}
            for pk, units in charges:
                at, spent = self._spent.get((table, pk, kind), (second, 0.0))
                base = spent if at == second else 0.0
                totals[pk] = totals.get(pk, base) + units
            for pk, total in totals.items():
                if total > limit:
                    self.throttled[pk] = self.throttled.get(pk, 0) + 1
                    self._write({"throttled": pk, "kind": kind, "at": self.clock()})
                    return pk
            for pk, total in totals.items():
                self._spent[(table, pk, kind)] = (second, total)
            if len(self._spent) > 100_000:  # old seconds are never read again
                self._spent = {k: v for k, v in self._spent.items() if v[0] == second}
        return None

    def _close_window(self, window: int) -> None:
        """Log the closing window's busiest partitions (units per kind); start `window`."""
        if self._window >= 0 and self.log is not None:
            busiest: dict[str, list[tuple[float, str]]] = {"read": [], "write": []}
            for (_, pk, kind), (at, spent) in self._spent.items():
                if at == self._window:
                    busiest[kind].append((spent, pk))
            top = {kind: sorted(found, reverse=True)[:5] for kind, found in busiest.items()}
            self._write({"window": self._window, "window_s": self.window_s, "busiest": top})
        self._window = window

    def _write(self, record: dict[str, Any]) -> None:
        if self.log is not None:
            with self.log.open("a") as handle:
                handle.write(json.dumps(record) + "\n")

    def charge_write(self, operation: str, body: bytes) -> str | None:
        try:
            request = json.loads(body)
        except ValueError:
            return None
        charges = write_charges(operation, request, len(body))
        return self.take(str(request.get("TableName", "")), charges, "write") if charges else None

    def charge_read(self, operation: str, body: bytes, returned: int) -> str | None:
        if operation not in _READS:
            return None
        try:
            request = json.loads(body)
        except ValueError:
            return None
        charge = read_charge(operation, request, returned)
        if charge is None:
            return None
        return self.take(str(request.get("TableName", "")), [charge], "read")


def throttled_message(pk: str) -> str:
    return (
        "The level of configured provisioned throughput for the table was exceeded: "
        f"partition {pk[:40]!r} passed its per-partition limit this second"
    )
