"""Each ledger day records how many shards it was written over; readers read exactly those
(kiln.accounting.ledger_shards), against the moto server over HTTP."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from conftest import AwsStack
from kiln.accounting import usage
from kiln.accounting.ledger import CallLedger, CallRecord, LedgerQuery, writes
from kiln.accounting.ledger_shards import FORMER_SHARDS, SINCE_PK

DAY = "2027-01-15"


class Clock:
    def __init__(self, now: float = 1_800_000_000.0) -> None:  # 2027-01-15T08:00:00Z
        self.now = now

    def __call__(self) -> float:
        return self.now


def ledger(aws: AwsStack, clock: Clock, shards: int) -> CallLedger:
    return CallLedger(
        aws.clients.dynamodb, table=aws.table, digest_key=b"k" * 32, clock=clock, shards=shards
    )


def entry(tool: str, outcome: Any = "ok") -> CallRecord:
    return CallRecord(at="", caller="key:ci", tool=tool, outcome=outcome, revision=1,
                      duration_ms=100.0)  # fmt: skip


def queried_partitions(aws: AwsStack) -> list[str]:
    """The partition of every Query the test's client sends from now on."""
    seen: list[str] = []
    aws.clients.dynamodb.meta.events.register(
        "before-parameter-build.dynamodb.Query",
        lambda params, **_: seen.append(params["ExpressionAttributeValues"][":pk"]["S"]),
    )
    return seen


def test_a_day_is_read_over_the_most_shards_its_writers_used_so_the_count_may_be_lowered(
    aws: AwsStack,
) -> None:
    """A process with fewer shards than the day's other writer still reads every entry (it
    once read only its own shards: lowering the count hid the rest)."""
    clock = Clock()
    wide, narrow = ledger(aws, clock, shards=8), ledger(aws, clock, shards=1)
    for index in range(40):
        wide.record(entry(f"w{index}"))
        clock.now += 1
    for index in range(5):
        narrow.record(entry(f"n{index}"))
        clock.now += 1
    clock.now += 10  # past the totals' interval: each writes its counts with its next entry
    wide.record(entry("w_last"))
    clock.now += 1
    narrow.record(entry("n_last"))
    expected = ["n_last", "w_last", *(f"n{i}" for i in range(4, -1, -1)),
                *(f"w{i}" for i in range(39, -1, -1))]  # fmt: skip
    queried = queried_partitions(aws)
    for reader in (narrow, ledger(aws, clock, shards=32)):
        page, cursor = reader.query(LedgerQuery(limit=100))
        assert [r.tool for r in page] == expected, f"read by a ledger of {reader.shards} shards"
        assert cursor is None
        assert reader.totals(DAY)["all"]["calls"] == 47
    entries = sorted({p for p in queried if p.startswith("LEDGER#")})
    assert entries == [f"LEDGER#{DAY}#{n}" for n in range(8)], "the day's 8 shards, no more"
    start = datetime(2027, 1, 15, tzinfo=UTC)
    charted = list(narrow.between(start, start + timedelta(days=1)))
    assert len(charted) == 47


def test_a_months_chart_queries_the_days_with_calls_and_reads_every_days_count_at_once(
    aws: AwsStack,
) -> None:
    """A 30-day chart once queried 31 days x 32 shards (about 1,000 queries) however few
    days had calls."""
    clock = Clock()
    calls = ledger(aws, clock, shards=32)
    for outcome in ("ok", "ok", "tool_error"):
        calls.record(entry("charted", outcome))
    clock.now -= 3 * 86_400
    calls.record(entry("charted"))
    clock.now += 3 * 86_400 + 60
    db = aws.clients.dynamodb
    requests: list[str] = []
    db.meta.events.register("before-call.dynamodb", lambda model, **_: requests.append(model.name))
    queried = queried_partitions(aws)
    now = datetime.fromtimestamp(clock.now, UTC)
    start, step, count = usage.window("month", now)
    chart = usage.chart(calls.between(start, start + step * count, tool="charted"),
                        start, step, count)  # fmt: skip
    assert chart["totals"]["calls"] == 4
    assert chart["totals"]["errors"] == 1
    assert [b["calls"] for b in chart["buckets"] if b["calls"]] == [1, 3]
    # two days with calls, read over their 32 shards each; every day's count read at once
    assert len({p for p in queried if p.startswith("LEDGER#")}) == 2 * 32
    assert len(queried) == 2 * 32
    assert len(requests) <= 2 * 32 + 2, f"{len(requests)} requests: {set(requests)}"


def test_days_written_before_days_recorded_their_shards_are_read_over_every_former_shard(
    aws: AwsStack,
) -> None:
    """A table written by an earlier version: no mark, entries in all of 32 shards."""
    db = aws.clients.dynamodb
    clock = Clock()
    earlier = ledger(aws, clock, shards=FORMER_SHARDS)
    for shard in range(FORMER_SHARDS):
        item: dict[str, Any] = earlier.item(entry(f"old{shard}"))[0]
        item["pk"] = {"S": f"LEDGER#{DAY}#{shard}"}
        for put in writes(aws.table, item):
            db.put_item(**put["Put"])
        clock.now += 1
    for mark in ((SINCE_PK, "SINCE"), (f"LEDGERSUM#{DAY}", "SHARDS")):  # as before records
        db.delete_item(TableName=aws.table, Key={"pk": {"S": mark[0]}, "sk": {"S": mark[1]}})
    narrow = ledger(aws, clock, shards=1)
    assert len(narrow.query(LedgerQuery(limit=100))[0]) == FORMER_SHARDS
    narrow.record(entry("new"))  # the first writer to record marks tomorrow on
    since = db.get_item(TableName=aws.table, Key={"pk": {"S": SINCE_PK}, "sk": {"S": "SINCE"}})
    assert since["Item"]["day"]["S"] == "2027-01-16"
    assert len(narrow.query(LedgerQuery(limit=100))[0]) == FORMER_SHARDS + 1  # today: all 32
    clock.now += 86_400
    narrow.record(entry("tomorrow"))
    queried = queried_partitions(aws)
    page = narrow.query(LedgerQuery(limit=100, since="2027-01-16"))[0]
    assert [r.tool for r in page] == ["tomorrow"]
    assert queried == ["LEDGER#2027-01-16#0"]  # a recorded day: its one shard


def test_a_query_back_through_days_without_calls_reads_their_counts_a_few_requests_at_once(
    aws: AwsStack,
) -> None:
    """A filtered page that goes back a month (the filter rarely matches) once queried every
    shard of every day; then read each day's count with a request of its own."""
    clock = Clock()
    calls = ledger(aws, clock, shards=1)
    calls.record(entry("rare"))
    clock.now += 20 * 86_400
    for _ in range(10):
        calls.record(entry("common"))
        clock.now += 1
    requests: list[str] = []
    aws.clients.dynamodb.meta.events.register(
        "before-call.dynamodb", lambda model, **_: requests.append(model.name)
    )
    queried = queried_partitions(aws)
    page, cursor = calls.query(LedgerQuery(tool="rare", limit=5))
    assert [r.tool for r in page] == ["rare"]
    assert cursor is None
    assert set(queried) == {"LEDGER#2027-02-04#0", "LEDGER#2027-01-15#0"}  # the days with calls
    # today's count, then 1, 2, 4, 8, 16 days' at once: 31 days in 6 reads
    assert requests.count("GetItem") + requests.count("BatchGetItem") <= 6, requests
