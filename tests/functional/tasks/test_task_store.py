"""Task records on the moto server: expiry, leases, the running count, owners."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from typing import Any

import pytest

from conftest import AwsStack
from kiln.accounting.gate import CallGate, CallTicket
from kiln.accounting.ledger import CallLedger
from kiln.protocol.backend import CallContext
from kiln.tasks.service import TaskService
from kiln.tasks.settings import TaskSettings
from kiln.tasks.store import TaskItem, TaskLimitError, TaskStore, owner_key

NOW = time.time()


def item(**changes: Any) -> TaskItem:
    base = TaskItem(
        owner=owner_key("key:alice"),
        task_id="t-" + str(time.monotonic_ns()),
        tool="slow",
        revision=1,
        version="2026-07-28",
        arguments={"n": 1},
        status="working",
        created_at="2026-11-30T00:00:00.000Z",
        updated_at="2026-11-30T00:00:00.000Z",
        ttl_ms=3_600_000,
        poll_interval_ms=1000,
        expires_at=NOW + 3600,
        lease_until=NOW + 60,
    )
    return replace(base, **changes)


@pytest.fixture
def store(aws: AwsStack) -> TaskStore:
    return TaskStore(aws.clients.dynamodb, aws.clients.s3, table=aws.table, bucket=aws.bucket)


def test_an_expired_task_reads_as_gone_before_dynamodb_deletes_it(store: TaskStore) -> None:
    old = item(expires_at=NOW - 1)
    store.create(old, max_running=5)
    assert store.get(old.owner, old.task_id) is None
    assert store.page(old.owner, None)[0] == []


def test_a_task_is_found_only_under_its_owner(store: TaskStore) -> None:
    mine = item()
    store.create(mine, max_running=5)
    assert store.get(mine.owner, mine.task_id) is not None
    assert store.get(owner_key("key:bob"), mine.task_id) is None
    assert store.get(owner_key("anonymous"), mine.task_id) is None


def test_a_task_leaves_working_once_and_gives_its_running_slot_back_once(
    store: TaskStore,
) -> None:
    first, second = item(), item()
    store.create(first, max_running=2)
    store.create(second, max_running=2)
    with pytest.raises(TaskLimitError):
        store.create(item(), max_running=2)
    assert store.running(first.owner) == 2
    assert store.settle(first, "cancelled", now="2026-11-30T00:00:01.000Z") is True
    assert store.settle(first, "completed", now="2026-11-30T00:00:02.000Z") is False
    assert store.running(first.owner) == 1
    found = store.get(first.owner, first.task_id)
    assert found is not None
    assert found.status == "cancelled"
    assert store.renew(first, lease_until=NOW + 90) is False  # a cancelled run learns it here


def test_each_status_message_moves_the_tasks_last_updated_time(store: TaskStore) -> None:
    task = item()
    store.create(task, max_running=5)
    assert store.note(task, "1 of 3", now="2026-11-30T00:00:01.000Z") is True
    first = store.get(task.owner, task.task_id)
    assert first is not None
    assert (first.status_message, first.updated_at) == ("1 of 3", "2026-11-30T00:00:01.000Z")
    assert store.note(task, "2 of 3", now="2026-11-30T00:00:02.000Z") is True
    second = store.get(task.owner, task.task_id)
    assert second is not None
    assert (second.status_message, second.updated_at) == ("2 of 3", "2026-11-30T00:00:02.000Z")
    assert store.settle(task, "completed", now="2026-11-30T00:00:03.000Z") is True
    assert store.note(task, "3 of 3", now="2026-11-30T00:00:04.000Z") is False
    ended = store.get(task.owner, task.task_id)
    assert ended is not None
    assert (ended.status_message, ended.updated_at) == ("2 of 3", "2026-11-30T00:00:03.000Z")


def test_a_reader_fails_a_working_task_whose_lease_ran_out(store: TaskStore) -> None:
    lost = item(lease_until=NOW - 1)
    store.create(lost, max_running=5)
    service = TaskService(store, Unused(), TaskSettings(), Unused())
    ctx = CallContext(principal=Principal("key:alice"))
    record = asyncio.run(service.get_task(lost.task_id, ctx))
    assert record is not None
    assert record.status == "failed"
    assert record.error is not None
    assert "lease ran out" in str(record.error["message"])
    assert store.running(lost.owner) == 0


def test_a_renewed_lease_is_not_failed_by_a_reader_that_saw_the_old_one(
    store: TaskStore,
) -> None:
    live = item(lease_until=NOW - 1)
    store.create(live, max_running=5)
    assert store.renew(live, lease_until=NOW + 60) is True
    stale_view = live  # what a reader read before the renewal
    assert store.settle(stale_view, "failed", now="x", lease_seen=live.lease_until) is False
    found = store.get(live.owner, live.task_id)
    assert found is not None
    assert found.status == "working"


def test_a_task_whose_lease_ran_out_is_ledgered_once_by_the_reader_that_fails_it(
    aws: AwsStack, store: TaskStore
) -> None:
    ledger = CallLedger(aws.clients.dynamodb, table=aws.table, digest_key=b"k" * 32)
    ticket = CallTicket(caller="key:alice", view=None, tool="slow", revision=1, bundle=None,
                        digest="hmac-sha256:00", started=NOW - 30)  # fmt: skip
    lost = item(lease_until=NOW - 1, call=ticket.as_json())
    store.create(lost, max_running=5)
    service = TaskService(store, Unused(), TaskSettings(), Unused(), gate=CallGate(None, ledger))
    ctx = CallContext(principal=Principal("key:alice"))
    for _ in range(2):  # the second reader finds it failed already: no second entry
        record = asyncio.run(service.get_task(lost.task_id, ctx))
        assert record is not None
        assert record.status == "failed"
    (entry,) = ledger.query()[0]
    assert (entry.caller, entry.tool, entry.outcome) == ("key:alice", "slow", "tool_error")
    assert entry.detail == "task: its worker was lost"
    assert entry.duration_ms >= 30_000  # from the call to the reader that found it lost


class Principal:
    def __init__(self, label: str) -> None:
        self.label = label


class Unused:
    """Neither the starter nor the tools take part in reading a task."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"{name} was not expected to be used")
