"""Changes to moto, made once in the emulator process, that keep its memory flat.

moto backs up every table a transaction touches with `copy.deepcopy` before applying it,
so each catalog write copied the whole table (3-6 MB per write, growing with the catalog,
and held on to long enough that the process grew to gigabytes). Here a transaction backs
up only the items it touches and puts exactly those back when it is cancelled.

moto also appends every model object it ever makes to a class-level list
(`BaseModel.instances_tracked`, for its dashboard and `reset`), so every item copy a write
makes (the transaction's backup, update_item's copy of the old item, each parsed item)
lived for as long as the process: a few KB per write, forever. The emulator uses neither
the dashboard nor `reset`, so nothing is tracked.

A Query on a table's own key read every item of the table and sorted them all to keep those
of one partition: with the call ledger in the same table, every catalog listing got slower
with each call ever made (tens of milliseconds after 100,000). It now reads that partition;
and as the ledger's partition of a day grows with every call, each partition is kept sorted
(a SortedDict), so a Query reads the page it returns (a bisection to its first key, then at
most Limit + 1 items), and a Scan chains the sorted partitions instead of sorting every item.

What stays is the data: each stored item (a call-ledger entry is one per `tools/call`, kept
for its retention) took ~3.5 KB, partly its own copy of every attribute name and of values
such as the tool's name repeated in every entry. Stored items share those strings (~2.5 KB).

And moto loads a service's backend on its first request, under its own lock, inside the
emulator's state lock: `load_backend` does it before those (see there).
"""

from __future__ import annotations

import copy
import functools
import importlib
import inspect
import itertools
import sys
import threading
from typing import Any

_INSTALLED = False


def _key_of(table: Any, op_type: str, op: dict[str, Any]) -> tuple[Any, Any] | None:
    from moto.dynamodb.models.dynamo_type import DynamoType

    attrs = op.get("Item") if op_type == "Put" else op.get("Key")
    if not isinstance(attrs, dict) or table.hash_key_attr not in attrs:
        return None
    hash_key = DynamoType(attrs[table.hash_key_attr])
    range_key = None
    if table.range_key_attr is not None:
        if table.range_key_attr not in attrs:
            return None
        range_key = DynamoType(attrs[table.range_key_attr])
    return hash_key, range_key


def _restore(table: Any, hash_key: Any, range_key: Any, item: Any) -> None:
    if range_key is None:
        if item is None:
            table.items.pop(hash_key, None)
        else:
            table.items[hash_key] = item
        return
    bucket = table.items[hash_key]
    if item is None:
        bucket.pop(range_key, None)
        if not bucket:
            table.items.pop(hash_key, None)
    else:
        bucket[range_key] = item


def _stop_tracking_instances() -> None:
    from moto.core.common_models import BaseModel

    def untracked_new(cls: Any, *args: Any, **kwargs: Any) -> Any:
        return super(BaseModel, cls).__new__(cls)  # as moto's, without keeping a reference

    BaseModel.__new__ = staticmethod(untracked_new)  # type: ignore[method-assign]
    from moto.core.model_instances import reset_model_data

    reset_model_data()  # and let go of what was tracked before


SHARED_VALUE_MAX = 32  # string values up to this length (names, outcomes) are shared


def _share_strings() -> None:
    from moto.dynamodb.models.dynamo_type import Item

    original = Item.__init__

    @functools.wraps(original)
    def init(self: Any, hash_key: Any, range_key: Any, attrs: dict[str, Any]) -> None:
        original(self, hash_key, range_key, {sys.intern(k): v for k, v in attrs.items()})
        for value in self.attrs.values():
            if value.type == "S" and len(value.value) <= SHARED_VALUE_MAX:
                value.value = sys.intern(value.value)

    Item.__init__ = init  # type: ignore[method-assign]


_query = threading.local()  # what a Query on a table's own key asks for (see _bounded)


def _sorted_partitions() -> None:
    """Each partition of a table with a sort key is a SortedDict: a Query reads the keys it
    returns (a bisection, then the page), not the whole partition sorted anew."""
    from collections import defaultdict

    from moto.dynamodb.models.table import Table
    from sortedcontainers import SortedDict  # type: ignore[import-untyped]

    init = Table.__init__

    @functools.wraps(init)
    def sorted_init(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        self.items = defaultdict(SortedDict)

    Table.__init__ = sorted_init  # type: ignore[method-assign]


def _bounds(op: str | None, objs: list[Any]) -> tuple[Any, Any, bool, bool] | None:
    """(low, high, low inclusive, high inclusive) of a sort-key condition; None: not a range."""
    if op is None:
        return None, None, True, True
    first, last = (objs[0], objs[-1]) if objs else (None, None)
    found: dict[str, tuple[Any, Any, bool, bool]] = {
        "EQ": (first, first, True, True),
        "LE": (None, first, True, True),
        "LT": (None, first, True, False),
        "GE": (first, None, True, True),
        "GT": (first, None, False, True),
        "BETWEEN": (first, last, True, True),
    }
    return found.get(op)


def _bounded(table: Any, partition: Any, asked: dict[str, Any]) -> list[Any]:
    """The items of `partition` a Query can return: those its sort-key condition admits, from
    its start key on, in its direction, one more than its Limit (moto's own loop then decides
    the page and its LastEvaluatedKey exactly as before)."""
    from moto.dynamodb.models.dynamo_type import DynamoType

    bounds = _bounds(asked.get("range_comparison"), asked.get("range_objs") or [])
    if bounds is None or asked.get("filter_kwargs"):
        return list(partition.values())
    low, high, low_in, high_in = bounds
    forward = asked.get("scan_index_forward", True) is not False
    start = asked.get("exclusive_start_key")
    if start and table.range_key_attr in start:
        after = DynamoType(start[table.range_key_attr])
        if forward and (low is None or after >= low):
            low, low_in = after, False
        elif not forward and (high is None or after <= high):
            high, high_in = after, False
    keys = partition.irange(low, high, inclusive=(low_in, high_in), reverse=not forward)
    limit = asked.get("limit")
    if limit:
        keys = itertools.islice(keys, limit + 1)
    return [partition[key] for key in keys]


def _query_one_partition() -> None:
    from moto.dynamodb.models.table import Table

    query, all_items = Table.query, Table.all_items
    signature = inspect.signature(query)

    @functools.wraps(query)
    def one_partition_query(self: Any, hash_key: Any, *args: Any, **kwargs: Any) -> Any:
        asked = signature.bind(self, hash_key, *args, **kwargs).arguments
        if hash_key is None or asked.get("index_name"):  # an index's query reads its own way
            return query(self, hash_key, *args, **kwargs)
        _query.asked = (self, hash_key, asked)
        try:
            return query(self, hash_key, *args, **kwargs)
        finally:
            _query.asked = None

    @functools.wraps(all_items)
    def partition_items(self: Any) -> Any:
        asked = getattr(_query, "asked", None)
        if asked is None or asked[0] is not self:
            return _all_sorted(self)
        found = self.items.get(asked[1])  # a defaultdict: .get does not add the partition
        if found is None:
            return []
        return _bounded(self, found, asked[2]) if self.has_range_key else [found]

    Table.query = one_partition_query  # type: ignore[method-assign]
    Table.all_items = partition_items  # type: ignore[method-assign]


def _all_sorted(table: Any) -> list[Any]:
    """Every item in key order (a Scan's): the partitions in order, each already sorted."""
    if not table.has_range_key:
        return [table.items[key] for key in sorted(table.items)]
    return [item for key in sorted(table.items) for item in table.items[key].values()]


def install() -> None:
    """Patch moto (idempotent): per-item undo for transactions instead of table copies, and
    no model object kept beyond its use, stored items sharing their strings."""
    global _INSTALLED
    if _INSTALLED:
        return
    from moto.dynamodb.models import DynamoDBBackend
    from moto.dynamodb.models.table import Table

    _stop_tracking_instances()
    _share_strings()
    _sorted_partitions()
    _query_one_partition()
    # moto's own backup becomes the live table itself (its rollback assigns it back: a
    # no-op); the items the transaction touched are restored below instead.
    Table.__deepcopy__ = lambda self, memo: self  # type: ignore[attr-defined]
    original = DynamoDBBackend.transact_write_items

    @functools.wraps(original)
    def transact_write_items(self: Any, transact_items: list[dict[str, Any]]) -> None:
        undo: list[tuple[Any, Any, Any, Any]] = []
        for entry in transact_items:
            if len(entry) != 1:
                continue  # moto refuses it before changing anything
            op_type, op = next(iter(entry.items()))
            table = self.tables.get(op.get("TableName")) if isinstance(op, dict) else None
            key = _key_of(table, op_type, op) if table is not None else None
            if table is not None and key is not None:
                before = table.get_item(*key)
                undo.append((table, *key, copy.deepcopy(before)))
        try:
            original(self, transact_items)
        except BaseException:
            for table, hash_key, range_key, item in reversed(undo):
                _restore(table, hash_key, range_key, item)
            raise

    DynamoDBBackend.transact_write_items = transact_write_items  # type: ignore[method-assign]
    _INSTALLED = True


def load_backend(dispatcher: Any, service: str) -> None:
    """Import `service`'s moto backend and make its web app, the slow part outside every lock.

    moto does this on a service's first request, under the lock each request through its
    web app takes, while the emulator holds its state lock around the call: ssm's backend
    imports moto.ec2 (1.6-2.5 s here), and every other request waited for it. Two requests
    that both arrive first wait for the same import (Python's per-module import lock). Where
    moto has no such module, moto answers the request as before."""
    try:
        importlib.import_module(f"moto.{service}.models")
        importlib.import_module(f"moto.{service}.urls")
    except ImportError:
        return
    with dispatcher.lock:
        if service not in dispatcher.app_instances:
            dispatcher.app_instances[service] = dispatcher.create_app(service)
