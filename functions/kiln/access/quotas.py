"""Quotas: calls per minute and tool run-seconds per day, counted in DynamoDB.

Items in the catalog table (the public function may write these, and no others):

| pk                  | sk              | what                                               |
| ------------------- | --------------- | -------------------------------------------------- |
| `QUOTA#<subject>`   | `MINUTE`        | `window_start` (epoch ms), `calls` in that window   |
| `QUOTA#<subject>#DAY` | `DAY#<date>`  | `calls` admitted and `seconds` run that UTC day     |

A subject is `key:<key id>` or `view:<name>`. Every count is one conditional atomic
update, so concurrent callers can never be admitted past a limit: DynamoDB serialises the
updates of one item and the condition sees every earlier increment. A minute window starts
with the first call after the previous one ended (not on the clock's minute), so a burst is
counted in one window.

Claims: a process counts a window's calls one at a time while less than `CLAIM_SHARE` x 2
calls are left in it, which keeps small limits exact (every call is one update). Far from
the limit it claims several calls with one update and admits them from memory, so a busy
key costs one DynamoDB request per many calls instead of one per call. A claim is at most
what this process admitted for the subject in about `CLAIM_HORIZON_S` of this window (its
own rate), `CLAIM_MAX`, and 1/CLAIM_SHARE of what the window has left. Claims are counted
in DynamoDB like calls, so nothing is ever admitted past the limit; their cost is that a
window's count includes calls a process has claimed but not used yet (fewer than one
claim: about a second of its own traffic), which other processes cannot have. An idle
process (a frozen Lambda container) holds at most that; claims lapse with their window.

Run-seconds are claimed alike, so a key's (or a shared view's) `DAY` item is not written once
or twice per call. A process that has used a subject's run-seconds at some rate claims a
block of seconds (`ADD seconds :block`, on the condition that the block fits under the
limit): about what it used in `claim_horizon_s`, at most `CLAIM_MAX_S` and 1/CLAIM_SHARE
of what the day has left. While it holds claimed seconds it admits calls and charges their
runs from memory; the calls it admitted are added to `calls` with its next write. Without a
block (a first call, a slow caller, or less than `CLAIM_SHARE` x `CLAIM_MIN_S` left) it counts
exactly as before: one conditional update per call (`seconds < limit`) and one per run's
charge. So the day is never admitted past its limit by more than one run per process (a run's
length is known only after it), a busy subject's `DAY` item takes about one write per process
per `claim_horizon_s`, and what a process claimed but did not use (at most a block: about
`claim_horizon_s` of its own use) counts as used; `calls` of the day may lag by the calls
admitted from a block not yet written.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

from botocore.exceptions import ClientError

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

QuotaName = Literal["calls_per_minute", "run_seconds_per_day"]
WINDOW_MS = 60_000
DAY_ITEM_TTL_S = 3 * 86_400
_ATTEMPTS = 5
CLAIM_MAX = 32  # calls one update may claim for this process
CLAIM_SHARE = 64  # ... and at most this fraction of what the window has left
CLAIM_HORIZON_S = 1.0  # ... and about what this process admits in this long
CLAIM_MAX_S = 300.0  # run-seconds one update may claim for this process
CLAIM_MIN_S = 0.05  # a smaller block is not worth an update: count exactly


@dataclass(frozen=True)
class Quota:
    """Limits for one subject; None means no limit of that kind."""

    calls_per_minute: int | None = None
    run_seconds_per_day: float | None = None

    @property
    def empty(self) -> bool:
        return self.calls_per_minute is None and self.run_seconds_per_day is None

    def as_dict(self) -> dict[str, Any]:
        return {
            "calls_per_minute": self.calls_per_minute,
            "run_seconds_per_day": self.run_seconds_per_day,
        }


NO_QUOTA = Quota()


class QuotaRuleError(ValueError):
    """A quota setting that breaks its rule; the message names the field."""


def check_quota(value: object, *, field: str = "quota") -> Quota:
    """A Quota from its JSON form `{"calls_per_minute": 50, "run_seconds_per_day": 3600}`."""
    if value is None:
        return NO_QUOTA
    if not isinstance(value, dict):
        raise QuotaRuleError(f"{field}: must be an object with calls_per_minute and/or "
                             "run_seconds_per_day")  # fmt: skip
    unknown = sorted(set(map(str, value)) - {"calls_per_minute", "run_seconds_per_day"})
    if unknown:
        raise QuotaRuleError(f"{field}.{unknown[0]}: is not a quota setting")
    calls = value.get("calls_per_minute")
    seconds = value.get("run_seconds_per_day")
    if calls is not None and (
        isinstance(calls, bool) or not isinstance(calls, int) or not 1 <= calls <= 1_000_000
    ):
        raise QuotaRuleError(f"{field}.calls_per_minute: must be a whole number from 1 to 1000000")
    if seconds is not None and (
        isinstance(seconds, bool)
        or not isinstance(seconds, int | float)
        or not math.isfinite(seconds)
        or not 0 < seconds <= 86_400 * 1000
    ):
        raise QuotaRuleError(f"{field}.run_seconds_per_day: must be a number above 0")
    return Quota(calls, float(seconds) if seconds is not None else None)


class QuotaExceededError(Exception):
    """A call refused by a quota: which one, for whom, and when it resets."""

    def __init__(
        self, *, subject: str, quota: QuotaName, limit: float, retry_after_s: int, resets_at: str
    ) -> None:
        what = "calls per minute" if quota == "calls_per_minute" else "tool run-seconds per day"
        kind, _, name = subject.partition(":")
        owner = "this key" if kind == "key" else f"view {name!r}"
        super().__init__(
            f"Quota exceeded: {owner} may make {_number(limit)} {what}; "
            f"it resets at {resets_at} (retry after {retry_after_s} s)"
        )
        self.subject = subject
        self.quota = quota
        self.limit = limit
        self.retry_after_s = retry_after_s
        self.resets_at = resets_at

    def data(self) -> dict[str, Any]:
        return {
            "quota": self.quota,
            "limit": self.limit,
            "resets_at": self.resets_at,
            "retry_after_s": self.retry_after_s,
        }


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def _iso(epoch_s: float) -> str:
    moment = datetime.fromtimestamp(epoch_s, UTC)
    return moment.isoformat(timespec="seconds").replace("+00:00", "Z")


def _day(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, UTC).strftime("%Y-%m-%d")


def _next_midnight(epoch_s: float) -> float:
    moment = datetime.fromtimestamp(epoch_s, UTC)
    midnight = datetime(moment.year, moment.month, moment.day, tzinfo=UTC) + timedelta(days=1)
    return midnight.timestamp()


@dataclass
class _Day:
    """A subject's run-seconds of one day as this process holds them."""

    day: str
    limit: float
    seen: float = 0.0  # the day's seconds when last read
    budget: float = 0.0  # seconds claimed by this process and not used yet
    used: float = 0.0  # seconds this process's runs used since it last counted (`mark`)
    mark: float = 0.0  # when this process last counted in the day item
    calls: int = 0  # calls admitted from a block and not yet added to the item


@dataclass
class _Window:
    """A subject's minute window as this process last saw it."""

    start_ms: int
    limit: int
    calls: int  # counted in DynamoDB when last seen (this process's unused claims included)
    claimed: int = 0  # calls claimed by this process and not yet admitted
    admitted: int = 0  # calls this process admitted in this window
    since_ms: int = 0  # when this process first counted in it


@dataclass(eq=False)
class QuotaCounters:
    db: DynamoDBClient
    _: KW_ONLY
    table: str
    clock: Callable[[], float] = time.time
    claim_horizon_s: float = CLAIM_HORIZON_S
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)
    _windows: dict[str, _Window] = field(default_factory=dict, init=False)
    _days: dict[str, _Day] = field(default_factory=dict, init=False)
    _claiming: dict[str, threading.Lock] = field(default_factory=dict, init=False)

    def admit(self, subject: str, quota: Quota) -> None:
        """Count one call against `quota`; QuotaExceededError when it is spent.

        A refusal counts nothing: a call the day's run-seconds refuse gives back its minute.
        """
        if quota.calls_per_minute is not None:
            self._count_minute(subject, quota.calls_per_minute)
        if quota.run_seconds_per_day is not None:
            try:
                self._check_day(subject, quota.run_seconds_per_day)
            except QuotaExceededError:
                self.release(subject, quota)
                raise

    def release(self, subject: str, quota: Quota) -> None:
        """Give back a call `admit` counted (a later check refused the call after all)."""
        if quota.calls_per_minute is None:
            return
        if self._return_claim(subject, quota.calls_per_minute):
            return
        try:
            self.db.update_item(
                TableName=self.table,
                Key=self._key(subject, "MINUTE"),
                UpdateExpression="SET calls = calls - :one",
                ConditionExpression="calls > :zero",
                ExpressionAttributeValues={":one": {"N": "1"}, ":zero": {"N": "0"}},
            )
        except ClientError as error:
            if error.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise

    def charge(self, subject: str, seconds: float) -> None:
        """Add a finished run's seconds to today's total (from this process's claimed block
        while it lasts)."""
        now = self.clock()
        seconds = max(seconds, 0.0)
        with self._lock:
            held = self._days.get(subject)
            if held is not None and held.day == _day(now):
                held.used += seconds
                taken = min(held.budget, seconds)
                held.budget -= taken
                seconds -= taken
        if seconds <= 0:
            return
        self.db.update_item(
            TableName=self.table,
            Key=self._key(subject, f"DAY#{_day(now)}"),
            UpdateExpression="ADD seconds :s SET expires_at = :ttl",
            ExpressionAttributeValues={
                ":s": {"N": f"{seconds:.3f}"},
                ":ttl": {"N": str(int(now) + DAY_ITEM_TTL_S)},
            },
        )

    def usage(self, subject: str) -> dict[str, Any]:
        """What `subject` has used: calls in the current minute window, calls/seconds today."""
        now = self.clock()
        minute = self._get(subject, "MINUTE")
        day = self._get(subject, f"DAY#{_day(now)}")
        in_window = minute is not None and int(minute["window_start"]["N"]) > now * 1000 - WINDOW_MS
        return {
            "calls_this_minute": int(minute["calls"]["N"]) if minute and in_window else 0,
            "calls_today": int(day["calls"]["N"]) if day and "calls" in day else 0,
            "run_seconds_today": float(day["seconds"]["N"]) if day and "seconds" in day else 0.0,
        }

    # -- internals ---------------------------------------------------------------------

    def _key(self, subject: str, sk: str) -> dict[str, Any]:
        # The DAY items in a partition of their own: a busy subject's minute claims and day
        # claims each have a partition's write units.
        pk = f"QUOTA#{subject}#DAY" if sk.startswith("DAY#") else f"QUOTA#{subject}"
        return {"pk": {"S": pk}, "sk": {"S": sk}}

    def _get(self, subject: str, sk: str) -> dict[str, Any] | None:
        item: dict[str, Any] | None = self.db.get_item(
            TableName=self.table, Key=self._key(subject, sk), ConsistentRead=True
        ).get("Item")
        return item

    def _check_day(self, subject: str, limit: float) -> None:
        """Admit one call against the day's run-seconds: from a claimed block, by claiming
        one, or exactly (one conditional update)."""
        now = self.clock()
        today = _day(now)
        with self._lock:
            held = self._days.get(subject)
            if held is None or (held.day, held.limit) != (today, limit):
                held = self._days[subject] = _Day(today, limit, mark=now)
            if held.budget > 0:
                held.calls += 1
                return
            calls, held.calls = held.calls + 1, 0
            block = self._block(held, now)
            held.used, held.mark = 0.0, now
        try:
            if block > 0 and self._claim_seconds(subject, held, block, calls, now):
                return
            seen = self._day_update(
                subject, "ADD calls :n SET expires_at = :ttl",
                "attribute_not_exists(seconds) OR seconds < :limit",
                {":n": {"N": str(calls)}, ":limit": {"N": repr(float(limit))}}, now,
            )  # fmt: skip
        except ClientError:
            with self._lock:
                held.calls += calls - 1  # this call was not admitted; the others were
            raise
        if seen is None:
            resets = _next_midnight(now)
            raise QuotaExceededError(
                subject=subject,
                quota="run_seconds_per_day",
                limit=limit,
                retry_after_s=max(1, math.ceil(resets - now)),
                resets_at=_iso(resets),
            )
        with self._lock:
            held.seen = float(seen.get("seconds", {}).get("N", 0))

    def _block(self, held: _Day, now: float) -> float:
        """The run-seconds to claim now (0: count exactly): this process's recent use."""
        rate = held.used / max(0.1, now - held.mark)
        own = rate * self.claim_horizon_s
        block = min(CLAIM_MAX_S, own, (held.limit - held.seen) / CLAIM_SHARE)
        return block if block >= CLAIM_MIN_S else 0.0

    def _claim_seconds(
        self, subject: str, held: _Day, block: float, calls: int, now: float
    ) -> bool:
        """Claim `block` seconds if they fit under the limit (and count `calls`)."""
        seen = self._day_update(
            subject, "ADD seconds :b, calls :n SET expires_at = :ttl",
            "attribute_not_exists(seconds) OR seconds <= :most",
            {":b": {"N": f"{block:.3f}"}, ":n": {"N": str(calls)},
             ":most": {"N": repr(float(held.limit - block))}}, now,
        )  # fmt: skip
        if seen is None:
            return False
        with self._lock:
            held.budget += block
            held.seen = float(seen.get("seconds", {}).get("N", 0))
        return True

    def _day_update(
        self, subject: str, update: str, condition: str, values: dict[str, Any], now: float
    ) -> dict[str, Any] | None:
        """The day item after a conditional update; None when the condition failed."""
        ttl = {":ttl": {"N": str(int(now) + DAY_ITEM_TTL_S)}}
        key = self._key(subject, f"DAY#{_day(now)}")
        return self._conditional(key, update, condition, {**values, **ttl})

    def _count_minute(self, subject: str, limit: int) -> None:
        if self._take_claim(subject, limit):
            return
        if self._claim_size(subject, limit) == 1:
            self._claim(subject, limit, 1)  # concurrent callers count concurrently
            return
        with self._claim_lock(subject):  # one claim in flight: the others wait and share it
            if not self._take_claim(subject, limit):
                self._claim(subject, limit, self._claim_size(subject, limit))

    def _current(self, subject: str, limit: int) -> _Window | None:
        """This process's view of the subject's window, if that window is still open."""
        found = self._windows.get(subject)
        now_ms = int(self.clock() * 1000)
        if found is None or found.limit != limit or found.start_ms <= now_ms - WINDOW_MS:
            return None
        return found

    def _take_claim(self, subject: str, limit: int) -> bool:
        return self._move_claim(subject, limit, admitted=1)

    def _return_claim(self, subject: str, limit: int) -> bool:
        """Keep a given-back call as a claim of this process (while it holds claims anyway)."""
        return self._move_claim(subject, limit, admitted=-1)

    def _move_claim(self, subject: str, limit: int, *, admitted: int) -> bool:
        """Admit one of this process's claimed calls (1) or give one back to its claims (-1);
        False, and nothing moves, unless it holds claims in the subject's open window."""
        with self._lock:
            window = self._current(subject, limit)
            if window is None or window.claimed == 0:
                return False
            window.claimed -= admitted
            window.admitted += admitted
            return True

    def _claim_size(self, subject: str, limit: int) -> int:
        with self._lock:
            window = self._current(subject, limit)
        if window is None:
            return 1  # a window this process has not seen: count one call, and learn it
        elapsed_s = max(1.0, (self.clock() * 1000 - window.since_ms) / 1000)
        rate = (window.admitted + 1) / elapsed_s  # grows from 1 by doubling, like slow start
        own = int(rate * self.claim_horizon_s)
        return max(1, min(CLAIM_MAX, own, (limit - window.calls) // CLAIM_SHARE))

    def _claim_lock(self, subject: str) -> threading.Lock:
        with self._lock:
            return self._claiming.setdefault(subject, threading.Lock())

    def _saw(self, subject: str, limit: int, item: dict[str, Any], claimed: int) -> None:
        start, calls = int(item["window_start"]["N"]), int(item["calls"]["N"])
        with self._lock:
            known = self._windows.get(subject)
            if known is not None and (known.start_ms, known.limit) == (start, limit):
                known.calls = max(known.calls, calls)
                known.claimed += claimed
                known.admitted += 1
            else:
                now_ms = int(self.clock() * 1000)
                self._windows[subject] = _Window(start, limit, calls, claimed, 1, now_ms)

    def _claim(self, subject: str, limit: int, size: int) -> None:
        """Count `size` calls in the subject's window: one admitted now, the rest claimed for
        this process. QuotaExceededError when the window has no call left."""
        for _ in range(_ATTEMPTS):
            now_ms = int(self.clock() * 1000)
            cutoff = now_ms - WINDOW_MS
            seen = self._try(
                subject,
                "SET calls = calls + :n",
                "window_start > :cutoff AND calls <= :most",
                {":n": {"N": str(size)}, ":cutoff": {"N": str(cutoff)},
                 ":most": {"N": str(limit - size)}},
            )  # fmt: skip
            if seen is not None:
                self._saw(subject, limit, seen, size - 1)
                return
            current = self._get(subject, "MINUTE")
            if current is not None and int(current["window_start"]["N"]) > cutoff:
                calls = int(current["calls"]["N"])
                if calls >= limit:
                    resets_ms = int(current["window_start"]["N"]) + WINDOW_MS
                    raise QuotaExceededError(
                        subject=subject,
                        quota="calls_per_minute",
                        limit=limit,
                        retry_after_s=max(1, math.ceil((resets_ms - now_ms) / 1000)),
                        resets_at=_iso(resets_ms / 1000),
                    )
                size = min(size, limit - calls)
                continue  # a window another caller has just opened, or fewer calls left
            size = min(size, limit)
            seen = self._try(
                subject,
                "SET window_start = :now, calls = :n",
                "attribute_not_exists(window_start) OR window_start <= :cutoff",
                {":n": {"N": str(size)}, ":now": {"N": str(now_ms)},
                 ":cutoff": {"N": str(cutoff)}},
            )  # fmt: skip
            if seen is not None:
                self._saw(subject, limit, seen, size - 1)
                return
        raise QuotaExceededError(  # the window kept moving under us: refuse rather than guess
            subject=subject,
            quota="calls_per_minute",
            limit=limit,
            retry_after_s=1,
            resets_at=_iso(self.clock() + 1),
        )

    def _try(
        self, subject: str, update: str, condition: str, values: dict[str, Any]
    ) -> dict[str, Any] | None:
        """The minute item after a conditional update; None when the condition failed."""
        return self._conditional(self._key(subject, "MINUTE"), update, condition, values)

    def _conditional(
        self, key: dict[str, Any], update: str, condition: str, values: dict[str, Any]
    ) -> dict[str, Any] | None:
        """An item after a conditional update; None when the condition failed."""
        try:
            answer = self.db.update_item(
                TableName=self.table,
                Key=key,
                UpdateExpression=update,
                ConditionExpression=condition,
                ExpressionAttributeValues=values,
                ReturnValues="ALL_NEW",
            )
        except ClientError as error:
            if error.response["Error"]["Code"] == "ConditionalCheckFailedException":
                return None
            raise
        attributes: dict[str, Any] = answer["Attributes"]
        return attributes
