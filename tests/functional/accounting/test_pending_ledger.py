"""`kiln dev`'s ledger entries held on disk before the answer (kiln.accounting.pending), against
the moto server: written to the store right after, and after a crash exactly once."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path

from conftest import AwsStack
from kiln.accounting.ledger import CallLedger, CallRecord, LedgerQuery
from kiln.accounting.pending import PendingLedger, stored_in

DAY = "2027-01-15"


def ledger(aws: AwsStack) -> CallLedger:
    return CallLedger(aws.clients.dynamodb, table=aws.table, digest_key=b"k" * 32,
                      retention_days=30, clock=lambda: 1_800_000_000.0)  # fmt: skip


def item(calls: CallLedger, tool: str) -> dict[str, object]:
    entry = CallRecord(at="", caller="key:ci", tool=tool, outcome="ok", revision=1)
    return calls.item(entry)[0]


def test_a_held_entry_is_on_disk_at_once_and_in_the_store_after_drain(
    aws: AwsStack, tmp_path: Path
) -> None:
    calls = ledger(aws)
    release = threading.Event()

    def slow_write(entry: object) -> None:  # the store answers only when the test says
        release.wait(30)
        calls.write(entry)  # type: ignore[arg-type]

    pending = PendingLedger(
        tmp_path / "pending", slow_write, stored_in(aws.clients.dynamodb, aws.table)
    )
    pending.start()
    try:
        held = item(calls, "a")
        pending.hold(held)  # returns before the store has it
        on_disk = [json.loads(line) for line in (tmp_path / "pending").read_text().splitlines()]
        assert on_disk == [held]
        assert calls.query(LedgerQuery(limit=10))[0] == []
        release.set()
        assert pending.drain(30), "the writer did not write the held entry"
        assert [e.tool for e in calls.query(LedgerQuery(limit=10))[0]] == ["a"]
        assert (tmp_path / "pending").read_bytes() == b"", "a written entry stayed in the file"
    finally:
        release.set()
        pending.close()


def test_replay_writes_each_entry_a_killed_run_left_exactly_once(
    aws: AwsStack, tmp_path: Path
) -> None:
    calls = ledger(aws)
    written, unwritten = item(calls, "written"), item(calls, "unwritten")
    calls.write(written)  # the run had stored this one before it was killed
    lines = [json.dumps(written), json.dumps(unwritten), '{"pk": {"S": "LEDG']  # torn last
    (tmp_path / "pending").write_text("\n".join(lines))
    pending = PendingLedger(
        tmp_path / "pending", calls.write, stored_in(aws.clients.dynamodb, aws.table)
    )
    assert pending.replay() == 1
    tools = sorted(e.tool for e in calls.query(LedgerQuery(limit=10))[0])
    assert tools == ["unwritten", "written"]
    assert calls.totals(DAY)["all"]["calls"] == 2, calls.totals(DAY)
    assert (tmp_path / "pending").read_bytes() == b""
    assert pending.replay() == 0  # nothing left to write twice
    assert calls.totals(DAY)["all"]["calls"] == 2


def test_the_writer_of_a_held_entry_is_woken_once_its_answer_has_gone(
    aws: AwsStack, tmp_path: Path
) -> None:
    """kiln dev wakes the store writer after the call's answer (kiln.runner.afterwards), so
    that the store write does not compete with the answer; a ledger query in between (drain)
    does not wait for that answer."""
    calls = ledger(aws)
    kept: list[Callable[[], None]] = []
    order: list[str] = []

    def write(entry: object) -> None:
        order.append("written")
        calls.write(entry)  # type: ignore[arg-type]

    pending = PendingLedger(tmp_path / "pending", write, stored_in(aws.clients.dynamodb, aws.table),
                            later=kept.append)  # fmt: skip
    pending.start()
    try:
        time.sleep(0.5)  # the writer is idle, waiting for an entry
        pending.hold(item(calls, "a"))
        assert len(kept) == 1, "holding an entry did not keep its writer's wake for later"
        time.sleep(0.5)
        assert order == [], "the writer wrote before the entry's answer had gone"
        order.append("answer sent")
        kept.pop()()
        assert pending.drain(30), "the woken writer did not write the entry"
        assert order == ["answer sent", "written"]

        pending.hold(item(calls, "b"))  # its answer has not gone yet: a query still sees it
        assert pending.drain(30), "drain waited for an answer that had not been sent"
        assert sorted(e.tool for e in calls.query(LedgerQuery(limit=10))[0]) == ["a", "b"]
    finally:
        pending.close()
