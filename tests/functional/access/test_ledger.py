"""The call ledger in DynamoDB (moto server over HTTP): records, filters, pages, totals."""

from __future__ import annotations

import json

import pytest

from conftest import AwsStack
from kiln.access.ledger import CallLedger, CallRecord, LedgerQueryError


class Clock:
    def __init__(self, now: float = 1_800_000_000.0) -> None:  # 2027-01-15T08:00:00Z
        self.now = now

    def __call__(self) -> float:
        return self.now


def ledger(aws: AwsStack, clock: Clock, *, retention_days: int = 30) -> CallLedger:
    return CallLedger(
        aws.clients.dynamodb,
        table=aws.table,
        digest_key=b"k" * 32,
        retention_days=retention_days,
        clock=clock,
    )


def entry(tool: str, caller: str = "key:ci", outcome: str = "ok") -> CallRecord:
    return CallRecord(at="", caller=caller, tool=tool, outcome=outcome, revision=1)  # type: ignore[arg-type]


def test_entries_come_back_newest_first_across_days_in_pages(aws: AwsStack) -> None:
    clock = Clock()
    calls = ledger(aws, clock)
    for index in range(7):
        calls.record(entry(f"tool{index}"))
        clock.now += 6 * 3600  # spans two UTC days
    page, cursor = calls.query(limit=3)
    names = [r.tool for r in page]
    while cursor is not None:
        page, cursor = calls.query(limit=3, cursor=cursor)
        names += [r.tool for r in page]
    assert names == [f"tool{index}" for index in reversed(range(7))]


def test_a_page_reads_one_entry_more_than_it_returns_per_shard_not_the_whole_day(
    aws: AwsStack,
) -> None:
    clock = Clock()
    calls = ledger(aws, clock)
    for index in range(7):
        calls.record(entry(f"tool{index}"))
        clock.now += 1
    asked: list[object] = []
    aws.clients.dynamodb.meta.events.register(
        "before-parameter-build.dynamodb.Query", lambda params, **_: asked.append(params["Limit"])
    )
    page, cursor = calls.query(limit=3)
    assert [r.tool for r in page] == ["tool6", "tool5", "tool4"]
    # One request per shard (and one for entries from before sharding), each for the page
    # and the cursor's entry: never a second page of any shard.
    assert asked == [4] * (calls.shards + 1)
    assert [r.tool for r in calls.query(limit=3, cursor=cursor)[0]] == ["tool3", "tool2", "tool1"]


def test_filters_select_by_tool_caller_outcome_and_time(aws: AwsStack) -> None:
    clock = Clock()
    calls = ledger(aws, clock)
    calls.record(entry("a", "key:one", "ok"))
    clock.now += 60
    calls.record(entry("b", "key:two", "tool_error"))
    clock.now += 60
    calls.record(entry("a", "key:two", "refused"))
    assert [r.outcome for r in calls.query(tool="a")[0]] == ["refused", "ok"]
    assert [r.tool for r in calls.query(caller="key:two")[0]] == ["a", "b"]
    assert [r.caller for r in calls.query(outcome="tool_error")[0]] == ["key:two"]
    window = calls.query(since="2027-01-15T08:00:30Z", until="2027-01-15T08:01:30Z")[0]
    assert [r.tool for r in window] == ["b"]


def test_entries_expire_after_the_retention(aws: AwsStack) -> None:
    clock = Clock()
    calls = ledger(aws, clock, retention_days=3)
    calls.record(entry("a"))
    items = aws.clients.dynamodb.scan(TableName=aws.table)["Items"]
    (item,) = [i for i in items if i["pk"]["S"].startswith("LEDGER#")]
    assert int(item["expires_at"]["N"]) == int(clock.now) + 3 * 86_400


def test_arguments_are_recorded_as_a_keyed_digest_only(aws: AwsStack) -> None:
    calls = ledger(aws, Clock())
    digest = calls.digest({"pin": "4242-planted"})
    assert digest == calls.digest({"pin": "4242-planted"})
    assert digest != calls.digest({"pin": "4243-planted"})
    other = CallLedger(aws.clients.dynamodb, table=aws.table, digest_key=b"x" * 32)
    assert other.digest({"pin": "4242-planted"}) != digest
    calls.record(CallRecord(at="", caller="anonymous", tool="t", outcome="ok", args_digest=digest))
    assert "4242" not in json.dumps(aws.clients.dynamodb.scan(TableName=aws.table)["Items"])


def test_totals_per_day_count_by_caller_and_tool(aws: AwsStack) -> None:
    clock = Clock()
    calls = ledger(aws, clock)
    for tool, caller, outcome in [("a", "key:1", "ok"), ("a", "key:2", "timeout"),
                                  ("b", "key:1", "ok")]:  # fmt: skip
        calls.record(CallRecord(at="", caller=caller, tool=tool, outcome=outcome,  # type: ignore[arg-type]
                                duration_ms=500.0))  # fmt: skip
    totals = calls.totals("2027-01-15")
    assert totals["all"]["calls"] == 3
    assert totals["by_caller"]["key:1"]["ok"] == 2
    assert totals["by_tool"]["a"]["timeout"] == 1
    assert totals["by_tool"]["a"]["run_seconds"] == 1.0
    assert calls.totals("2027-01-14")["all"]["calls"] == 0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"outcome": "maybe"}, "outcome: must be one of"),
        ({"limit": 0}, "limit: must be from 1"),
        ({"since": "yesterday"}, "since: must be an ISO 8601"),
        ({"cursor": "!!"}, "cursor: not a cursor"),
    ],
)
def test_bad_query_parameters_are_named(
    aws: AwsStack, kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(LedgerQueryError, match=message):
        ledger(aws, Clock()).query(**kwargs)  # type: ignore[arg-type]


def test_a_days_entries_are_spread_over_its_shards_and_still_read_in_order(
    aws: AwsStack,
) -> None:
    clock = Clock()
    calls = ledger(aws, clock)
    for index in range(40):
        calls.record(entry(f"tool{index:02d}"))
        clock.now += 1
    items = aws.clients.dynamodb.scan(TableName=aws.table)["Items"]
    partitions = {i["pk"]["S"] for i in items if i["pk"]["S"].startswith("LEDGER#")}
    assert len(partitions) > 4, partitions  # 40 entries at random over 16 shards
    assert all(p.rsplit("#", 1)[1].isdigit() for p in partitions)
    names = [r.tool for r in calls.query(limit=1000)[0]]
    assert names == [f"tool{index:02d}" for index in reversed(range(40))]


def test_entries_written_before_sharding_are_still_read(aws: AwsStack) -> None:
    clock = Clock()
    calls = ledger(aws, clock)
    item, _ = calls.item(entry("old"))
    calls.write({**item, "pk": {"S": item["pk"]["S"].rsplit("#", 1)[0]}})
    clock.now += 1
    calls.record(entry("new"))
    assert [r.tool for r in calls.query()[0]] == ["new", "old"]
    assert calls.totals(item["at"]["S"][:10])["all"]["calls"] == 2
