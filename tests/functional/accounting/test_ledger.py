"""The call ledger in DynamoDB (moto server over HTTP): records, filters, pages, totals."""

from __future__ import annotations

import json
from typing import Any

import pytest

from conftest import AwsStack
from kiln.accounting.ledger import CallLedger, CallRecord, LedgerQuery, LedgerQueryError, new_id


class Clock:
    def __init__(self, now: float = 1_800_000_000.0) -> None:  # 2027-01-15T08:00:00Z
        self.now = now

    def __call__(self) -> float:
        return self.now


def ledger(
    aws: AwsStack, clock: Clock, *, retention_days: int = 30, shards: int = 32
) -> CallLedger:
    return CallLedger(
        aws.clients.dynamodb,
        table=aws.table,
        digest_key=b"k" * 32,
        retention_days=retention_days,
        clock=clock,
        shards=shards,
    )


def entry(tool: str, caller: str = "key:ci", outcome: str = "ok") -> CallRecord:
    return CallRecord(at="", caller=caller, tool=tool, outcome=outcome, revision=1)  # type: ignore[arg-type]


def test_entries_come_back_newest_first_across_days_in_pages(aws: AwsStack) -> None:
    clock = Clock()
    calls = ledger(aws, clock)
    for index in range(7):
        calls.record(entry(f"tool{index}"))
        clock.now += 6 * 3600  # spans two UTC days
    page, cursor = calls.query(LedgerQuery(limit=3))
    names = [r.tool for r in page]
    while cursor is not None:
        page, cursor = calls.query(LedgerQuery(limit=3, cursor=cursor))
        names += [r.tool for r in page]
    assert names == [f"tool{index}" for index in reversed(range(7))]


def test_a_page_reads_about_twice_its_entries_across_the_shards_not_the_whole_day(
    aws: AwsStack,
) -> None:
    clock = Clock()
    calls = ledger(aws, clock, shards=8)
    for index in range(120):
        calls.record(entry(f"tool{index}"))
        clock.now += 1
    scanned: list[int] = []
    aws.clients.dynamodb.meta.events.register(
        "after-call.dynamodb.Query",
        lambda parsed, **_: scanned.append(int(parsed.get("ScannedCount", 0))),
    )
    page, cursor = calls.query(LedgerQuery(limit=10))
    assert [r.tool for r in page] == [f"tool{index}" for index in range(119, 109, -1)]
    assert sum(scanned) <= 3 * 11 + 2 * 8, f"{sum(scanned)} entries read for a page of 10"
    following = calls.query(LedgerQuery(limit=10, cursor=cursor))[0]
    assert [r.tool for r in following] == [f"tool{index}" for index in range(109, 99, -1)]


def test_each_entry_is_one_put_into_one_of_the_days_shards(aws: AwsStack) -> None:
    clock = Clock()
    calls = ledger(aws, clock, shards=4)
    sent: list[str] = []
    aws.clients.dynamodb.meta.events.register(
        "before-call.dynamodb", lambda model, **_: sent.append(model.name)
    )
    for _ in range(40):
        calls.record(entry("a"))
    # once a day, before its first entry, the process records its shards (a read of the
    # table's mark and one update: kiln.accounting.ledger_shards)
    assert sent[:2] == ["GetItem", "UpdateItem"]
    assert sent[2:] == ["PutItem"] * 40  # no totals write: within its interval
    items = aws.clients.dynamodb.scan(TableName=aws.table)["Items"]
    shards = {i["pk"]["S"] for i in items if i["pk"]["S"].startswith("LEDGER#")}
    assert shards <= {f"LEDGER#2027-01-15#{n}" for n in range(4)}
    assert len(shards) >= 2


def test_filters_select_by_tool_caller_outcome_and_time(aws: AwsStack) -> None:
    clock = Clock()
    calls = ledger(aws, clock)
    calls.record(entry("a", "key:one", "ok"))
    clock.now += 60
    calls.record(entry("b", "key:two", "tool_error"))
    clock.now += 60
    calls.record(entry("a", "key:two", "refused"))
    assert [r.outcome for r in calls.query(LedgerQuery(tool="a"))[0]] == ["refused", "ok"]
    assert [r.tool for r in calls.query(LedgerQuery(caller="key:two"))[0]] == ["a", "b"]
    assert [r.caller for r in calls.query(LedgerQuery(outcome="tool_error"))[0]] == ["key:two"]
    window = calls.query(LedgerQuery(since="2027-01-15T08:00:30Z", until="2027-01-15T08:01:30Z"))[0]
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


def test_totals_count_each_tool_per_utc_hour_read_back_by_another_process(aws: AwsStack) -> None:
    """Entries at known hours of a day (the clock at 08:00Z), written by one process, flushed,
    and read per hour by another."""
    clock = Clock()  # 2027-01-15T08:00:00Z
    writer, reader = ledger(aws, clock, shards=4), ledger(aws, clock, shards=4)
    plan = [(0, "a", "ok"), (0, "a", "timeout"), (0, "b", "ok"), (3, "a", "tool_error"),
            (8, "a", "ok"), (8, "a", "ok"), (23, "b", "cancelled")]  # fmt: skip
    for hour, tool, outcome in plan:
        started = 1_800_000_000.0 + (hour - 8) * 3600 + 59  # a minute into the hour
        writer.record(CallRecord(at="", caller="key:1", tool=tool, outcome=outcome,  # type: ignore[arg-type]
                                 duration_ms=100.0), started=started)  # fmt: skip
    writer.day_totals.flush()
    hours = reader.totals("2027-01-15")["by_hour_tool"]
    assert sorted(hours) == ["00", "03", "08", "23"], hours
    assert hours["00"]["a"]["calls"] == 2
    assert (hours["00"]["a"]["ok"], hours["00"]["a"]["timeout"]) == (1, 1)
    assert hours["00"]["b"]["calls"] == 1
    assert hours["03"]["a"]["tool_error"] == 1
    assert hours["08"]["a"]["calls"] == 2
    assert hours["08"]["a"]["run_seconds"] == 0.2
    assert list(hours["23"]) == ["b"]
    assert hours["23"]["b"]["cancelled"] == 1
    assert "b" not in hours["08"]
    assert reader.totals("2027-01-14")["by_hour_tool"] == {}


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
        ledger(aws, Clock()).query(LedgerQuery(**kwargs))  # type: ignore[arg-type]


def test_a_filtered_query_reads_at_most_ten_times_its_page_and_gives_a_cursor_to_go_on(
    aws: AwsStack,
) -> None:
    """A filter that matches rarely once read the whole ledger in one request."""
    clock = Clock()
    calls = ledger(aws, clock, shards=4)
    calls.record(entry("rare"))
    for _ in range(200):
        clock.now += 1
        calls.record(entry("common"))
    scanned: list[int] = []
    aws.clients.dynamodb.meta.events.register(
        "after-call.dynamodb.Query",
        lambda parsed, **_: scanned.append(int(parsed.get("ScannedCount", 0))),
    )
    page, cursor = calls.query(LedgerQuery(tool="rare", limit=2))
    assert page == []
    assert cursor is not None
    # ten times the page, a small first page per shard, and the round that passed the budget
    assert sum(scanned) <= 10 * 3 + 2 * 4 + 4 * 3
    found = []
    while cursor is not None:
        page, cursor = calls.query(LedgerQuery(tool="rare", limit=2, cursor=cursor))
        found += page
    assert [r.tool for r in found] == ["rare"]


def test_totals_are_each_processs_counts_written_once_per_interval_not_the_entries(
    aws: AwsStack,
) -> None:
    """Two processes (two containers) write; a third reads the day's totals."""
    clock = Clock()
    first, second, reader = (ledger(aws, clock, shards=4) for _ in range(3))
    db = aws.clients.dynamodb
    written: list[str] = []
    db.meta.events.register(
        "before-parameter-build.dynamodb.PutItem",
        lambda params, **_: written.append(params["Item"]["pk"]["S"]),
    )
    for outcome in ("ok", "ok", "tool_error"):
        first.record(CallRecord(at="", caller="key:1", tool="a", outcome=outcome,  # type: ignore[arg-type]
                                duration_ms=250.0))  # fmt: skip
    second.record(entry("b", "key:2"))
    assert reader.totals("2027-01-15")["all"]["calls"] == 0  # nothing written yet
    clock.now += 10  # the interval: each process writes its counts with its next entry
    first.record(entry("a", "key:1"))
    second.record(entry("b", "key:2"))
    sums = [pk for pk in written if pk.startswith("LEDGERSUM#")]
    assert len(sums) == 2  # all, the caller, the tool and the hour fit one item: one put each
    for item in db.scan(TableName=aws.table)["Items"]:
        if item["pk"]["S"].startswith("LEDGER#"):  # the entries go; the totals stay
            db.delete_item(TableName=aws.table, Key={"pk": item["pk"], "sk": item["sk"]})
    queried: list[str] = []
    db.meta.events.register(
        "before-parameter-build.dynamodb.Query",
        lambda params, **_: queried.append(params["ExpressionAttributeValues"][":pk"]["S"]),
    )
    totals = reader.totals("2027-01-15")
    assert totals["all"] == {"calls": 6, "ok": 5, "tool_error": 1, "timeout": 0, "refused": 0,
                             "cancelled": 0, "not_ready": 0, "run_seconds": 0.75}  # fmt: skip
    assert totals["by_caller"]["key:1"]["calls"] == 4
    assert totals["by_tool"]["b"]["ok"] == 2
    assert sorted(queried) == [f"LEDGERSUM#2027-01-15#{n}" for n in range(4)]
    first.record(entry("a", "key:1"))  # within the interval: this process's own count shows
    assert first.totals("2027-01-15")["all"]["calls"] == 7
    assert reader.totals("2027-01-15")["all"]["calls"] == 6


def test_many_callers_counts_are_packed_in_items_of_one_write_unit_and_sum_right(
    aws: AwsStack,
) -> None:
    """A process serving 150 callers: its items stay within 1 KB (one write unit each), a
    flush rewrites only the items whose counts changed, and the totals read back whole."""
    clock = Clock()
    writer, reader = ledger(aws, clock, shards=1), ledger(aws, clock, shards=1)
    db = aws.clients.dynamodb
    for n in range(150):
        writer.record(entry("a", f"key:{n:040d}"))  # long names: more items
    clock.now += 10
    writer.record(entry("a", "key:0"))
    items = [item for item in db.scan(TableName=aws.table)["Items"]
             if item["pk"]["S"].startswith("LEDGERSUM#2027")]  # fmt: skip
    sizes = [item_bytes(item) for item in items]
    assert len(items) > 4, sizes
    assert max(sizes) <= 1024, sizes
    assert reader.totals("2027-01-15")["all"]["calls"] == 151
    assert reader.totals("2027-01-15")["by_caller"][f"key:{149:040d}"]["calls"] == 1
    before = {item["sk"]["S"]: item for item in items}
    written: list[str] = []
    db.meta.events.register(
        "before-parameter-build.dynamodb.PutItem",
        lambda params, **_: written.append(params["Item"]["sk"]["S"]),
    )
    clock.now += 10
    writer.record(entry("a", f"key:{7:040d}"))  # the day's all, the tool, the hour, one caller
    rewritten = [sk for sk in written if sk in before]
    assert 1 <= len(rewritten) <= 3, rewritten  # not all of the process's items
    assert reader.totals("2027-01-15")["by_caller"][f"key:{7:040d}"]["calls"] == 2


def item_bytes(item: dict[str, Any]) -> int:
    """An item's size as DynamoDB counts it, bounded above: names, strings, numbers (<= 21)."""
    size = 0
    for name, value in item.items():
        size += len(name.encode())
        size += len(value["S"].encode()) if "S" in value else min(21, len(value["N"]) // 2 + 2)
    return size


def test_an_inner_call_is_written_with_the_id_it_was_given_and_its_parents_id(
    aws: AwsStack,
) -> None:
    clock = Clock()
    calls = ledger(aws, clock, shards=4)
    outer = new_id()
    inner = calls.record(
        CallRecord(at="", caller="key:ci", tool="fx_rate", outcome="ok", parent=outer)
    )
    clock.now += 1
    written = calls.record(CallRecord(at="", caller="key:ci", tool="job", outcome="ok", id=outer))
    assert (written.id, written.parent, inner.parent) == (outer, None, outer)
    page, _ = calls.query(LedgerQuery())
    assert [(r.tool, r.id, r.parent) for r in page] == [
        ("job", outer, None),
        ("fx_rate", inner.id, outer),
    ]
    assert inner.id != outer
    assert [r.as_json()["parent"] for r in page] == [None, outer]


def test_a_given_id_or_parent_that_is_not_twelve_lowercase_hex_digits_is_refused(
    aws: AwsStack,
) -> None:
    calls = ledger(aws, Clock(), shards=1)
    for field, value in [("id", "ABCDEF012345"), ("id", "abc"), ("parent", "0123456789abc"),
                         ("parent", "0123456789a#")]:  # fmt: skip
        bad = CallRecord(at="", caller="key:ci", tool="t", outcome="ok", **{field: value})
        with pytest.raises(
            ValueError, match=f"^{field}: must be a call id, 12 lowercase hex"
        ) as err:
            calls.record(bad)
        assert not isinstance(err.value, LedgerQueryError)  # a bug of the writer's, not a 400
    assert [i for i in aws.clients.dynamodb.scan(TableName=aws.table)["Items"]
            if i["pk"]["S"].startswith("LEDGER#")] == []  # fmt: skip


def test_entries_written_before_calls_had_parents_still_read(aws: AwsStack) -> None:
    clock = Clock()
    calls = ledger(aws, clock, shards=1)
    item, _ = calls.item(entry("old"))
    assert "parent" not in item
    calls.write(item)
    (old,) = calls.query(LedgerQuery())[0]
    assert (old.tool, old.parent, len(old.id)) == ("old", None, 12)


def test_the_inner_calls_of_a_call_are_found_by_parent_among_other_calls(
    aws: AwsStack,
) -> None:
    clock = Clock()
    calls = ledger(aws, clock, shards=4)
    outer, other = new_id(), new_id()
    for index in range(30):
        parent = outer if index in (3, 17) else (other if index % 2 else None)
        calls.record(CallRecord(at="", caller="key:ci", tool=f"t{index}", outcome="ok",
                                parent=parent))  # fmt: skip
        clock.now += 1
    found, cursor = calls.query(LedgerQuery(parent=outer))
    assert ([r.tool for r in found], cursor) == (["t17", "t3"], None)
    with pytest.raises(LedgerQueryError, match=r"^parent: must be a call id"):
        calls.query(LedgerQuery(parent="nope"))
