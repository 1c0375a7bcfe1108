"""The call ledger: one DynamoDB item per `tools/call`, never holding an argument's value.

| pk                              | sk                       | what                            |
| ------------------------------- | ------------------------ | ------------------------------- |
| `LEDGER#<yyyy-mm-dd>#<shard>`   | `<time, ms>#<random id>` | when, caller, view, tool,       |
|                                 |                          | revision, bundle, outcome,      |
|                                 |                          | duration, output size, digest,  |
|                                 |                          | parent (an inner call's)        |
| `LEDGERSUM#<yyyy-mm-dd>#<shard>` | `<process>#<item>#<n>`  | a process's day totals          |
|                                 |                          | (accounting/ledger_totals.py)   |
| `LEDGERSUM#<yyyy-mm-dd>`        | `SHARDS`                 | the shards the day was written  |
|                                 |                          | over (accounting/ledger_shards) |

No hot item, one write per call. An entry is one PutItem (about 400 bytes: one write unit)
into one of `shards` partitions of its UTC day, picked at random; DynamoDB serves 1,000
write units a second per partition, so the default 32 shards take 32,000 calls a second
(10,000 a second is 31 % of each partition's limit). The day's totals are counted in each
process and written at most once per `flush_s` (kiln.accounting.ledger_totals, which states what
they may lag and lose; the entries lose nothing). Each day records the most shards any of its
writers used, before its first entry from that writer, and readers read the day over exactly
that many (kiln.accounting.ledger_shards): none for a day without calls. So the shard count may
be raised or lowered at any time, and `kiln dev` writes one shard a day (its emulator has no
per-partition limit) and reads a page, a day's totals or a month's chart with a query a day.

A query reads the day's shards side by side: one page from each (of about twice its share of
the page), merged newest first by sort key (time, then a random id: one order across
shards), and more only from a shard whose unread part could still hold one of the page's
entries. A page costs about twice its own entries plus a page request per shard; a query
reads at most `READ_FACTOR` times the page it returns plus one small page per shard (a
filtered query that found fewer answers with a cursor to continue), so no read of the ledger
grows with the ledger. Entries carry `expires_at` (DynamoDB TTL) `retention_days` after the
call. Arguments are recorded as an HMAC-SHA256 of their canonical JSON under a server-side
key: equal arguments give equal digests, but a digest cannot be checked against guesses
without the key.

An entry's id is the end of its sort key: 12 lowercase hex digits, drawn when it is written or
given with the entry (`new_id`, drawn at admission, so that an outer call's id is known to its
inner calls, whose entries are written first and name it as `parent`). `parent` is one more
equality filter of a query (`LedgerQuery.parent`), read within the same budget as the others:
an outer call's inner calls, found without knowing when they ran.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import heapq
import hmac
import json
import logging
import math
import re
import secrets
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace
from datetime import UTC, date, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal, cast

from botocore.exceptions import BotoCoreError, ClientError

from kiln.accounting.ledger_shards import DaysBack, DayShards
from kiln.accounting.ledger_totals import DEFAULT_FLUSH_S, DayTotals
from kiln.errors import KilnError

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_dynamodb.type_defs import TransactWriteItemTypeDef

log = logging.getLogger("kiln.accounting.ledger")

Outcome = Literal["ok", "tool_error", "timeout", "refused", "cancelled", "not_ready"]
# `cancelled`: a task-augmented call cancelled by its caller (tasks/cancel) before it ended.
# `not_ready`: the tool did not start because its packages were still being built (entries
# written before this outcome existed say `tool_error` for such calls, and keep saying it).
OUTCOMES: tuple[Outcome, ...] = (
    "ok", "tool_error", "timeout", "refused", "cancelled", "not_ready",
)  # fmt: skip
DEFAULT_RETENTION_DAYS = 30
MAX_PAGE = 1000
READ_FACTOR = 10  # a query reads at most this many entries per entry it may return
DEFAULT_SHARDS = 32  # partitions per day: 10,000 calls/s is 31 % of each one's write limit


class LedgerQueryError(KilnError, ValueError, rest_code="bad_query"):
    """A filter or cursor the ledger cannot use; the message names the parameter."""


ENTRY_ID = re.compile(r"[0-9a-f]{12}")


def new_id() -> str:
    """A fresh entry id (what `CallLedger.item` draws for an entry that carries none)."""
    return secrets.token_hex(6)


def check_id(value: str, *, name: str, error: type[ValueError] = ValueError) -> str:
    """`value` if it is an entry id, else `error` naming `name` (a query's: LedgerQueryError)."""
    if not ENTRY_ID.fullmatch(value):
        raise error(f"{name}: must be a call id, 12 lowercase hex digits")
    return value


@dataclass(frozen=True)
class CallRecord:
    at: str  # ISO 8601 UTC, milliseconds
    caller: str  # key:<name>, jwt:<subject> or anonymous
    tool: str
    outcome: Outcome
    revision: int | None = None
    view: str | None = None
    bundle: str | None = None
    duration_ms: float = 0.0
    output_bytes: int = 0
    args_digest: str = ""
    detail: str | None = None  # for `refused`: which quota; for a task: `task` and why it ended
    id: str = ""  # given (`new_id`) or drawn when written
    parent: str | None = None  # an inner call's: the id of the call that made it

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def _iso_ms(epoch_s: float) -> str:
    moment = datetime.fromtimestamp(epoch_s, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def parse_time(value: str, *, name: str) -> datetime:
    """An ISO 8601 time or date from a query parameter; naive times are UTC."""
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise LedgerQueryError(
            f"{name}: must be an ISO 8601 time or date such as 2026-01-31T12:00:00Z"
        ) from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _sk_of(moment: datetime) -> str:
    return _iso_ms(moment.timestamp())


@dataclass(frozen=True)
class LedgerQuery:
    """Which entries a ledger query asks for: `/api/calls` takes exactly these parameters."""

    tool: str | None = None
    caller: str | None = None
    outcome: str | None = None
    since: str | None = None  # ISO 8601 time or date
    until: str | None = None
    limit: int = 100
    cursor: str | None = None  # `next_cursor` of the page before
    view: str | None = None
    parent: str | None = None  # the inner calls of the call with this id


class CallLedger:
    def __init__(
        self,
        dynamodb: DynamoDBClient,
        *,
        table: str,
        digest_key: bytes,
        retention_days: int = DEFAULT_RETENTION_DAYS,
        clock: Callable[[], float] = time.time,
        shards: int = DEFAULT_SHARDS,
        totals_flush_s: float = DEFAULT_FLUSH_S,
    ) -> None:
        if shards < 1:
            raise ValueError("ledger shards: must be at least 1")
        self._db = dynamodb
        self._table = table
        self._key = digest_key
        self.retention_days = retention_days
        self._clock = clock
        self.shards = shards
        # how many shards each day was written over (kiln.accounting.ledger_shards)
        self.day_shards = DayShards(
            dynamodb, table=table, shards=shards, retention_s=retention_days * 86_400,
            clock=clock,
        )  # fmt: skip
        self.day_totals = DayTotals(
            dynamodb, table=table, shards=shards, container=secrets.token_hex(6),
            flush_s=totals_flush_s, retention_s=retention_days * 86_400, clock=clock,
            shards_of=self.day_shards.of,
        )  # fmt: skip
        self._pool: ThreadPoolExecutor | None = None

    def digest(self, arguments: Mapping[str, Any]) -> str:
        """A keyed fingerprint of the arguments; their values never leave this function."""
        canonical = json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        mac = hmac.new(self._key, canonical.encode("utf-8", "surrogatepass"), hashlib.sha256)
        return "hmac-sha256:" + mac.hexdigest()

    def now(self) -> float:
        return self._clock()

    def record(self, entry: CallRecord, *, started: float | None = None) -> CallRecord:
        """Write one entry; `started` (epoch seconds) is when the call arrived."""
        item, written = self.item(entry, started=started)
        self.write(item)
        return written

    def write(self, item: Mapping[str, Any]) -> None:
        """Write an item made by `item` (one PutItem), and count it in the day's totals."""
        self.before_write(item)
        for put in writes(self._table, item):
            self._db.put_item(**put["Put"])
        self.counted(item)

    def before_write(self, item: Mapping[str, Any]) -> None:
        """Before an entry is written here: its day is recorded as written over this process's
        shards, once per day (kiln.accounting.ledger_shards); a failure stops the write."""
        self.day_shards.record(str(item["at"]["S"])[:10])

    def counted(self, item: Mapping[str, Any]) -> None:
        """Count an entry written (here, or in another transaction: a task's end) in its day's
        totals; this process's counts are written when `totals_flush_s` has passed."""
        self.day_totals.add(item)
        if self.day_totals.due():
            try:
                self.day_totals.flush()
            except (ClientError, BotoCoreError) as error:  # kept: written with a later flush
                log.warning("the ledger's day totals could not be written now: %s", error)

    def item(
        self, entry: CallRecord, *, started: float | None = None
    ) -> tuple[dict[str, Any], CallRecord]:
        """The DynamoDB item of an entry (for a caller that writes it in a transaction of its
        own), and the entry as it will read back."""
        moment = self._clock() if started is None else started
        at = _iso_ms(moment)
        entry_id = check_id(entry.id, name="id") if entry.id else new_id()
        if entry.parent is not None:
            check_id(entry.parent, name="parent")
        item: dict[str, Any] = {
            "pk": {"S": f"LEDGER#{at[:10]}#{secrets.randbelow(self.shards)}"},
            "sk": {"S": f"{at}#{entry_id}"},
            "at": {"S": at},
            "caller": {"S": entry.caller},
            "tool": {"S": entry.tool},
            "outcome": {"S": entry.outcome},
            "duration_ms": {"N": f"{entry.duration_ms:.1f}"},
            "output_bytes": {"N": str(entry.output_bytes)},
            "args_digest": {"S": entry.args_digest},
            "expires_at": {"N": str(int(moment) + self.retention_days * 86_400)},
        }
        if entry.revision is not None:
            item["revision"] = {"N": str(entry.revision)}
        for field in ("view", "bundle", "detail", "parent"):
            value = getattr(entry, field)
            if value:
                item[field] = {"S": value}
        # Whoever writes it (`write`, a task's transaction), its day is recorded first; once a
        # day this costs one update. Not now (the store did not answer): retried with the
        # next entry, and `write` records before it puts (a task's entry may then stay unread
        # until another entry of its day is recorded).
        try:
            self.day_shards.record(at[:10])
        except Exception as error:  # any store failure (unanswered: kiln.aws)
            log.warning("the ledger day's shard count could not be recorded now: %s", error)
        return item, replace(entry, at=at, id=entry_id)

    def query(self, where: LedgerQuery | None = None) -> tuple[list[CallRecord], str | None]:
        """Entries newest first, at most `limit`, and the cursor of the next page (or None)."""
        where = where or LedgerQuery()
        if where.outcome is not None and where.outcome not in OUTCOMES:
            raise LedgerQueryError(f"outcome: must be one of {', '.join(OUTCOMES)}")
        if not 1 <= where.limit <= MAX_PAGE:
            raise LedgerQueryError(f"limit: must be from 1 to {MAX_PAGE}")
        if where.parent is not None:
            check_id(where.parent, name="parent", error=LedgerQueryError)
        now = datetime.fromtimestamp(self._clock(), UTC)
        end = parse_time(where.until, name="until") if where.until else now
        start = (
            parse_time(where.since, name="since")
            if where.since
            else now - timedelta(days=self.retention_days)
        )
        high = _sk_of(end) + "#~"
        if where.cursor is not None:
            high = min(high, _decode_cursor(where.cursor))
        filters = {"tool": where.tool, "caller": where.caller, "outcome": where.outcome,
                   "view": where.view, "parent": where.parent}  # fmt: skip
        found: list[CallRecord] = []
        budget = _Budget(READ_FACTOR * (where.limit + 1))  # and a small page per shard
        day, first = _day_of(high), start.date()
        shards_of = DaysBack(self.day_shards, first)
        while day >= first:
            wanted = where.limit - len(found)
            shards = shards_of(day)
            if not shards:  # nothing was written that day
                day -= timedelta(days=1)
                continue
            items, cursor = self._day_page(day, _sk_of(start), high, filters, wanted, budget,
                                           shards)  # fmt: skip
            found += [_record(item) for item in items]
            if cursor is not None or len(found) == where.limit:
                return found, _encode_cursor(cursor or items[-1]["sk"]["S"])
            day -= timedelta(days=1)
        return found, None

    def between(
        self,
        start: datetime,
        end: datetime,
        *,
        tool: str | None = None,
        fields: tuple[str, ...] = ("at", "tool", "outcome", "duration_ms"),
    ) -> Iterator[CallRecord]:
        """Every entry from `start` to `end` (newest first), of one tool or of all, holding only
        `fields` (the rest left empty): reading fewer attributes is several times faster."""
        filters = {"tool": tool}
        high = _sk_of(end) + "#~"
        low = _sk_of(start)
        day = end.date()
        projection = tuple(dict.fromkeys(("sk", *fields)))
        days = [(end.date() - timedelta(days=n)).isoformat()
                for n in range((end.date() - start.date()).days + 1)]  # fmt: skip
        written = self.day_shards.of_days(days)  # the shards of each day, read at once
        while day >= start.date():
            shards = [self._items(day, shard, low, high, filters, projection)
                      for shard in range(written[day.isoformat()])]  # fmt: skip
            for item in heapq.merge(*shards, key=_sort_key, reverse=True):
                yield _partial(item)
            day -= timedelta(days=1)

    def totals(self, day: str) -> dict[str, Any]:
        """Calls, outcomes and run time of one UTC day, per caller and per tool, and per UTC
        hour (`"00"` to `"23"`) per tool (`by_hour_tool`, the hours with calls)."""
        try:
            the_day = date.fromisoformat(day)
        except ValueError:
            raise LedgerQueryError("day: must be a date such as 2026-01-31") from None
        by: dict[str, dict[str, dict[str, Any]]] = {"caller": {}, "tool": {}}
        hours: dict[str, dict[str, dict[str, Any]]] = {}
        everything: dict[str, Any] = _zero()
        for attribute, value in self.day_totals.read(the_day.isoformat()).items():
            dim, _, rest = attribute.partition("|")
            name, _, field = rest.rpartition("|")
            if dim == "all":
                _put(everything, field, value)
            elif dim in by and name:
                _put(by[dim].setdefault(name, _zero()), field, value)
            elif dim == "hour" and "|" in name:
                hour, _, tool = name.partition("|")
                _put(hours.setdefault(hour, {}).setdefault(tool, _zero()), field, value)
        return {"day": the_day.isoformat(), "all": everything, "by_caller": by["caller"],
                "by_tool": by["tool"], "by_hour_tool": dict(sorted(hours.items()))}  # fmt: skip

    # -- internals ---------------------------------------------------------------------

    def _day_page(
        self,
        day: date,
        low: str,
        high: str,
        filters: Mapping[str, str | None],
        wanted: int,
        budget: _Budget,
        shards: int,
    ) -> tuple[list[dict[str, Any]], str | None]:
        """The newest `wanted` entries of a day below `high`, merged from the `shards` it was
        written over, and a cursor when the read budget ran out first (every entry at or above
        it returned)."""
        budget.allow_shards(shards)
        starts: dict[int, Mapping[str, Any] | None] = dict.fromkeys(range(shards))
        size = min(wanted + 1, max(2, math.ceil(2 * (wanted + 1) / shards)))
        if any(value is not None for value in filters.values()):
            size = min(wanted + 1, size * FILTERED_FIRST)  # one round for a common match
        seen: list[dict[str, Any]] = []
        read = 0  # entries read from this day (the filter kept `seen` of them)
        while True:
            for shard, page in self._pages(day, low, high, filters, size, starts):
                budget.spend(int(page.get("ScannedCount", 0)))
                read += int(page.get("ScannedCount", 0))
                seen += [item for item in page["Items"] if item["sk"]["S"] < high]
                starts[shard] = page.get("LastEvaluatedKey")
            seen.sort(key=_sort_key, reverse=True)
            unread = {shard: start["sk"]["S"] for shard, start in starts.items() if start}
            last = seen[wanted - 1]["sk"]["S"] if len(seen) >= wanted else ""
            starts = {shard: starts[shard] for shard, sk in unread.items() if sk > last}
            if not starts:  # no unread entry could be among the page's
                return seen[:wanted], None
            if budget.spent:  # filters left the page short: the caller continues
                frontier = max(unread.values())  # every entry from here up has been read
                complete = [item for item in seen if item["sk"]["S"] >= frontier]
                return complete[:wanted], (None if len(complete) >= wanted else frontier)
            share = budget.left // len(starts)
            size = _next_size(size, wanted, filters, share, (len(seen), read, len(starts)))

    def _pages(
        self,
        day: date,
        low: str,
        high: str,
        filters: Mapping[str, str | None],
        size: int,
        starts: Mapping[int, Mapping[str, Any] | None],
    ) -> list[tuple[int, dict[str, Any]]]:
        """One page of each shard in `starts` (from its start), side by side."""

        def one(shard: int) -> tuple[int, dict[str, Any]]:
            key = f"LEDGER#{day.isoformat()}#{shard}"
            return shard, self._page(key, low, high, filters, size, starts[shard])

        if len(starts) == 1:
            return [one(next(iter(starts)))]
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="kiln-ledger")
        return list(self._pool.map(one, starts))

    def _items(
        self,
        day: date,
        shard: int,
        low: str,
        high: str,
        filters: Mapping[str, str | None],
        projection: tuple[str, ...],
    ) -> Iterator[dict[str, Any]]:
        """Every entry of one shard of a day, page by page, newest first."""
        start: Mapping[str, Any] | None = None
        key = f"LEDGER#{day.isoformat()}#{shard}"
        while True:
            page = self._page(key, low, high, filters, 1000, start, projection)
            yield from page.get("Items", [])
            start = page.get("LastEvaluatedKey")
            if start is None:
                return

    def _page(
        self,
        pk: str,
        low: str,
        high: str,
        filters: Mapping[str, str | None],
        limit: int,
        start: Mapping[str, Any] | None,
        projection: tuple[str, ...] = (),
    ) -> dict[str, Any]:
        """One Query page of a day's shard, newest first: at most `limit` entries read
        (holding only the `projection` attributes when one is given)."""
        names: dict[str, str] = {f"#p{i}": field for i, field in enumerate(projection)}
        values: dict[str, Any] = {":pk": {"S": pk}, ":lo": {"S": low}, ":hi": {"S": high}}
        clauses = []
        for field, wanted in filters.items():
            if wanted is not None:
                names[f"#{field}"] = field
                values[f":{field}"] = {"S": wanted}
                clauses.append(f"#{field} = :{field}")
        kwargs: dict[str, Any] = {
            "TableName": self._table,
            "KeyConditionExpression": "pk = :pk AND sk BETWEEN :lo AND :hi",
            "ExpressionAttributeValues": values,
            "ScanIndexForward": False,
            "Limit": limit,  # DynamoDB reads (and the emulator copies) no more than that
        }
        if clauses:
            kwargs["FilterExpression"] = " AND ".join(clauses)
        if projection:
            kwargs["ProjectionExpression"] = ", ".join(f"#p{i}" for i in range(len(projection)))
        if names:
            kwargs["ExpressionAttributeNames"] = names
        if start is not None:
            kwargs["ExclusiveStartKey"] = dict(start)
        return cast("dict[str, Any]", self._db.query(**kwargs))


def writes(table: str, item: Mapping[str, Any]) -> list[TransactWriteItemTypeDef]:
    """The transaction items that write a ledger entry (one Put: the day's totals are counted
    by the process that wrote it, `CallLedger.counted`)."""
    return [{"Put": {"TableName": table, "Item": dict(item)}}]


# A filtered page's first round reads this many times a plain one's per shard: a filter that
# keeps one entry in five then fills its page in one round of queries, not two, while a rarer
# one still stops at the read budget.
FILTERED_FIRST = 4


class _Budget:
    """How many more entries a query may read (DynamoDB's ScannedCount)."""

    def __init__(self, entries: int) -> None:
        self.left = entries
        self._shards = 0  # shards allowed a first small page each

    def allow_shards(self, shards: int) -> None:
        """Two entries more for each shard a day is read over (once, for the most shards)."""
        if shards > self._shards:
            self.left += 2 * (shards - self._shards)
            self._shards = shards

    def spend(self, entries: int) -> None:
        self.left -= entries

    @property
    def spent(self) -> bool:
        return self.left <= 0


def _next_size(
    size: int,
    wanted: int,
    filters: Mapping[str, str | None],
    share: int,
    so_far: tuple[int, int, int],
) -> int:
    """The next page size per shard: up to the page for a plain query (more could never be
    in it); for a filtered one, what the share of matches so far says the rest of the page
    needs (half again for luck) or double, within each shard's share of the read budget (a
    rare match then costs a few larger pages, not many of the page's size)."""
    if all(value is None for value in filters.values()):
        return min(wanted + 1, size * 2)
    kept, read, shards = so_far
    needed = math.ceil(1.5 * max(wanted - kept, 1) * read / max(kept, 1) / shards)
    return max(2, min(max(size * 2, needed), share, MAX_PAGE))


def _sort_key(item: Mapping[str, Any]) -> str:
    return str(item["sk"]["S"])


def _day_of(sk: str) -> date:
    return date.fromisoformat(sk[:10])


def _encode_cursor(sk: str) -> str:
    return base64.urlsafe_b64encode(sk.encode()).decode().rstrip("=")


def _decode_cursor(cursor: str) -> str:
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        parse_time(text.partition("#")[0], name="cursor")
        date.fromisoformat(text[:10])
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise LedgerQueryError("cursor: not a cursor this server gave out") from None
    return text


def _record(item: Mapping[str, Any]) -> CallRecord:
    def text(field: str) -> str | None:
        value = item.get(field)
        return None if value is None else str(value["S"])

    revision = item.get("revision")
    outcome = str(item["outcome"]["S"])
    return CallRecord(
        at=str(item["at"]["S"]),
        caller=str(item["caller"]["S"]),
        tool=str(item["tool"]["S"]),
        outcome=outcome if outcome in OUTCOMES else "tool_error",
        revision=int(revision["N"]) if revision else None,
        view=text("view"),
        bundle=text("bundle"),
        duration_ms=float(item["duration_ms"]["N"]),
        output_bytes=int(item["output_bytes"]["N"]),
        args_digest=str(item["args_digest"]["S"]),
        detail=text("detail"),
        id=str(item["sk"]["S"]).rpartition("#")[2],
        parent=text("parent"),
    )


def _partial(item: Mapping[str, Any]) -> CallRecord:
    """An entry read with a projection: the attributes it holds, the rest empty."""
    outcome = str(item["outcome"]["S"]) if "outcome" in item else "ok"
    return CallRecord(
        at=str(item["at"]["S"]) if "at" in item else "",
        caller=str(item["caller"]["S"]) if "caller" in item else "",
        tool=str(item["tool"]["S"]) if "tool" in item else "",
        outcome=outcome if outcome in OUTCOMES else "tool_error",
        duration_ms=float(item["duration_ms"]["N"]) if "duration_ms" in item else 0.0,
    )


def _zero() -> dict[str, Any]:
    return {"calls": 0, **{outcome: 0 for outcome in OUTCOMES}, "run_seconds": 0.0}


def _put(totals: dict[str, Any], field: str, number: float) -> None:
    if field == "run_ms":
        totals["run_seconds"] = round(number / 1000, 3)
    elif field in totals:
        totals[field] = int(number)
