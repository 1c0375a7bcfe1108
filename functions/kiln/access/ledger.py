"""The call ledger: one DynamoDB item per `tools/call`, never holding an argument's value.

| pk                    | sk                       | what                                     |
| --------------------- | ------------------------ | ---------------------------------------- |
| `LEDGER#<yyyy-mm-dd>` | `<time, ms>#<random id>` | when, caller, view, tool, revision,      |
|                       |                          | bundle, outcome, duration, output size,  |
|                       |                          | argument digest                          |

| `LEDGERSUM#<yyyy-mm-dd>` | `TOTALS`         | the day's counts and run time, per       |
|                       |                          | caller and per tool (`<dim>|<name>|<n>`) |

Entries carry `expires_at` (DynamoDB TTL) `retention_days` after the call. One partition per
UTC day keeps a query for a time range to one request per day and needs no index. Each
entry is written in one transaction with an update of its day's totals item, so the day's
totals are one read however many calls the day had; and a query reads at most
`READ_FACTOR` times the page it returns (a filtered query that found fewer answers with
a cursor to continue), so no read of the ledger grows with the ledger. Arguments
are recorded as an HMAC-SHA256 of their canonical JSON under a server-side key: equal
arguments give equal digests, but a digest cannot be checked against guesses without the key.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import random
import secrets
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any, Literal

from botocore.exceptions import ClientError

Outcome = Literal["ok", "tool_error", "timeout", "refused", "cancelled"]
# `cancelled`: a task-augmented call cancelled by its caller (tasks/cancel) before it ended.
OUTCOMES: tuple[Outcome, ...] = ("ok", "tool_error", "timeout", "refused", "cancelled")
DEFAULT_RETENTION_DAYS = 30
MAX_PAGE = 1000
READ_FACTOR = 10  # a query reads at most this many entries per entry it may return
WRITE_ATTEMPTS = 4  # an entry's transaction races others on its day's totals item


class LedgerQueryError(ValueError):
    """A filter or cursor the ledger cannot use; the message names the parameter."""


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
    id: str = ""

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


class CallLedger:
    def __init__(
        self,
        dynamodb: Any,
        *,
        table: str,
        digest_key: bytes,
        retention_days: int = DEFAULT_RETENTION_DAYS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._db = dynamodb
        self._table = table
        self._key = digest_key
        self.retention_days = retention_days
        self._clock = clock

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
        """Write an item made by `item`, with its day's totals."""
        for attempt in range(WRITE_ATTEMPTS):
            try:
                self._db.transact_write_items(TransactItems=writes(self._table, item))
                return
            except ClientError as error:
                reasons = error.response.get("CancellationReasons") or []
                racing = any(r.get("Code") == "TransactionConflict" for r in reasons)
                if not racing or attempt + 1 == WRITE_ATTEMPTS:
                    raise
                time.sleep(random.uniform(0.005, 0.02) * (attempt + 1))

    def item(
        self, entry: CallRecord, *, started: float | None = None
    ) -> tuple[dict[str, Any], CallRecord]:
        """The DynamoDB item of an entry (for a caller that writes it in a transaction of its
        own), and the entry as it will read back."""
        moment = self._clock() if started is None else started
        at = _iso_ms(moment)
        entry_id = secrets.token_hex(6)
        item: dict[str, Any] = {
            "pk": {"S": f"LEDGER#{at[:10]}"},
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
        for field in ("view", "bundle", "detail"):
            value = getattr(entry, field)
            if value:
                item[field] = {"S": value}
        return item, CallRecord(**{**entry.as_json(), "at": at, "id": entry_id})

    def query(self, where: LedgerQuery | None = None) -> tuple[list[CallRecord], str | None]:
        """Entries newest first, at most `limit`, and the cursor of the next page (or None)."""
        where = where or LedgerQuery()
        tool, caller, outcome, view = where.tool, where.caller, where.outcome, where.view
        since, until, limit, cursor = where.since, where.until, where.limit, where.cursor
        if outcome is not None and outcome not in OUTCOMES:
            raise LedgerQueryError(f"outcome: must be one of {', '.join(OUTCOMES)}")
        if not 1 <= limit <= MAX_PAGE:
            raise LedgerQueryError(f"limit: must be from 1 to {MAX_PAGE}")
        now = datetime.fromtimestamp(self._clock(), UTC)
        end = parse_time(until, name="until") if until else now
        start = (
            parse_time(since, name="since") if since else now - timedelta(days=self.retention_days)
        )
        high = _sk_of(end) + "#~"
        if cursor is not None:
            high = min(high, _decode_cursor(cursor))
        filters = {"tool": tool, "caller": caller, "outcome": outcome, "view": view}
        found: list[CallRecord] = []
        budget = READ_FACTOR * (limit + 1)
        day, first = _day_of(high), start.date()
        while day >= first:
            page_from: dict[str, Any] | None = None
            while True:
                # One more than a page: the cursor's own entry comes first.
                page = self._page(day, _sk_of(start), high, filters, limit + 1, page_from)
                budget -= int(page.get("ScannedCount", 0))
                for item in page["Items"]:
                    if item["sk"]["S"] >= high:  # the cursor's own entry, already served
                        continue
                    found.append(_record(item))
                    if len(found) == limit:
                        return found, _encode_cursor(item["sk"]["S"])
                page_from = page.get("LastEvaluatedKey")
                if page_from is None:
                    break
                if budget <= 0:  # filters left this page short: the caller continues
                    return found, _encode_cursor(page_from["sk"]["S"])
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
        days = (start.date(), end.date())
        for item in self._items(*days, _sk_of(start), high, filters, projection=fields):
            yield _partial(item)

    def totals(self, day: str) -> dict[str, Any]:
        """Calls, outcomes and run time of one UTC day, per caller and per tool."""
        try:
            the_day = date.fromisoformat(day)
        except ValueError:
            raise LedgerQueryError("day: must be a date such as 2026-01-31") from None
        item = self._db.get_item(
            TableName=self._table, Key=_totals_key(the_day.isoformat()), ConsistentRead=True
        ).get("Item", {})
        by: dict[str, dict[str, dict[str, Any]]] = {"caller": {}, "tool": {}}
        everything: dict[str, Any] = _zero()
        for attribute, value in item.items():
            dim, _, rest = attribute.partition("|")
            name, _, field = rest.rpartition("|")
            if dim == "all":
                _put(everything, field, value)
            elif dim in by and name:
                _put(by[dim].setdefault(name, _zero()), field, value)
        return {"day": the_day.isoformat(), "all": everything, "by_caller": by["caller"],
                "by_tool": by["tool"]}  # fmt: skip

    # -- internals ---------------------------------------------------------------------

    def _items(
        self,
        first: date,
        last: date,
        low: str,
        high: str,
        filters: Mapping[str, str | None],
        *,
        projection: tuple[str, ...] = (),
    ) -> Iterator[dict[str, Any]]:
        """Every entry of the days from `last` back to `first`, page by page, newest first."""
        day = last
        while day >= first:
            start: Mapping[str, Any] | None = None
            while True:
                page = self._page(day, low, high, filters, 1000, start, projection)
                yield from page.get("Items", [])
                start = page.get("LastEvaluatedKey")
                if start is None:
                    break
            day -= timedelta(days=1)

    def _page(
        self,
        day: date,
        low: str,
        high: str,
        filters: Mapping[str, str | None],
        limit: int,
        start: Mapping[str, Any] | None,
        projection: tuple[str, ...] = (),
    ) -> dict[str, Any]:
        """One Query page of a day, newest first: at most `limit` entries read (holding only
        the `projection` attributes when one is given)."""
        names: dict[str, str] = {f"#p{i}": field for i, field in enumerate(projection)}
        values: dict[str, Any] = {
            ":pk": {"S": f"LEDGER#{day.isoformat()}"},
            ":lo": {"S": low},
            ":hi": {"S": high},
        }
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
        page: dict[str, Any] = self._db.query(**kwargs)
        return page


def _totals_key(day: str) -> dict[str, Any]:
    return {"pk": {"S": f"LEDGERSUM#{day}"}, "sk": {"S": "TOTALS"}}


def writes(table: str, item: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The transaction items that write a ledger entry and add it to its day's totals."""
    counts = {"calls": "1", item["outcome"]["S"]: "1", "run_ms": item["duration_ms"]["N"]}
    names: dict[str, str] = {"#exp": "expires_at"}
    values: dict[str, Any] = {":exp": item["expires_at"]}
    adds: list[str] = []
    for dim, name in (("all", ""), ("caller", item["caller"]["S"]), ("tool", item["tool"]["S"])):
        for field, amount in counts.items():
            index = len(adds)
            names[f"#a{index}"] = f"{dim}|{name}|{field}" if name else f"{dim}|{field}"
            values[f":a{index}"] = {"N": amount}
            adds.append(f"#a{index} :a{index}")
    update = {
        "TableName": table,
        "Key": _totals_key(item["at"]["S"][:10]),
        "UpdateExpression": f"SET #exp = :exp ADD {', '.join(adds)}",
        "ExpressionAttributeNames": names,
        "ExpressionAttributeValues": values,
    }
    return [{"Put": {"TableName": table, "Item": dict(item)}}, {"Update": update}]


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


def _put(totals: dict[str, Any], field: str, value: Mapping[str, Any]) -> None:
    number = float(value.get("N", 0))
    if field == "run_ms":
        totals["run_seconds"] = round(number / 1000, 3)
    elif field in totals:
        totals[field] = int(number)
