"""Quota counters in DynamoDB (moto server over HTTP): exact under concurrency."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import AwsStack
from kiln.access.quotas import Quota, QuotaCounters, QuotaExceededError, QuotaRuleError, check_quota


class Clock:
    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def counters(aws: AwsStack, clock: Clock | None = None) -> QuotaCounters:
    return QuotaCounters(aws.clients.dynamodb, table=aws.table, clock=clock or Clock())


def admitted(quotas: QuotaCounters, subject: str, quota: Quota) -> bool:
    try:
        quotas.admit(subject, quota)
    except QuotaExceededError:
        return False
    return True


# 25: every call one conditional update; 1,000: far from the limit a process claims calls in
# batches, and still admits exactly the limit.
@pytest.mark.parametrize(("limit", "callers"), [(25, 60), (1_000, 1_100)], ids=["exact", "claims"])
def test_concurrent_callers_of_one_process_are_admitted_exactly_up_to_the_limit(
    aws: AwsStack, limit: int, callers: int
) -> None:
    quotas = counters(aws)
    quota = Quota(calls_per_minute=limit)
    with ThreadPoolExecutor(max_workers=12) as pool:
        results = list(pool.map(lambda _: admitted(quotas, "key:abc", quota), range(callers)))
    assert results.count(True) == limit
    assert quotas.usage("key:abc")["calls_this_minute"] == limit


def test_a_refusal_says_which_quota_and_when_it_resets(aws: AwsStack) -> None:
    clock = Clock()
    quotas = counters(aws, clock)
    quota = Quota(calls_per_minute=1)
    quotas.admit("key:k1", quota)
    clock.now += 20
    with pytest.raises(QuotaExceededError) as refused:
        quotas.admit("key:k1", quota)
    assert refused.value.quota == "calls_per_minute"
    assert refused.value.retry_after_s == 40
    assert "1 calls per minute" in str(refused.value)
    assert refused.value.data()["resets_at"].endswith("Z")


def test_a_new_window_opens_a_minute_after_the_first_call(aws: AwsStack) -> None:
    clock = Clock()
    quotas = counters(aws, clock)
    quota = Quota(calls_per_minute=2)
    assert [admitted(quotas, "view:v", quota) for _ in range(3)] == [True, True, False]
    clock.now += 60.5
    assert [admitted(quotas, "view:v", quota) for _ in range(3)] == [True, True, False]


def test_run_seconds_refuse_once_the_day_is_spent_and_reset_at_midnight(aws: AwsStack) -> None:
    clock = Clock(1_800_000_000.0)  # 2027-01-15T08:00:00Z
    quotas = counters(aws, clock)
    quota = Quota(run_seconds_per_day=2.0)
    quotas.admit("key:k2", quota)
    quotas.charge("key:k2", 2.5)
    with pytest.raises(QuotaExceededError) as refused:
        quotas.admit("key:k2", quota)
    assert refused.value.quota == "run_seconds_per_day"
    assert refused.value.resets_at == "2027-01-16T00:00:00Z"
    assert refused.value.retry_after_s == 16 * 3600
    clock.now += 16 * 3600
    quotas.admit("key:k2", quota)


def test_a_day_refusal_gives_back_the_minute_it_counted(aws: AwsStack) -> None:
    quotas = counters(aws)
    quota = Quota(calls_per_minute=5, run_seconds_per_day=1.0)
    quotas.admit("key:k3", quota)
    quotas.charge("key:k3", 1.0)
    assert not admitted(quotas, "key:k3", quota)
    assert quotas.usage("key:k3")["calls_this_minute"] == 1


def updates_made(aws: AwsStack) -> list[str]:
    """The DynamoDB UpdateItem requests this test's client sends from now on."""
    sent: list[str] = []
    aws.clients.dynamodb.meta.events.register(
        "before-call.dynamodb.UpdateItem", lambda **_: sent.append("UpdateItem")
    )
    return sent


def test_a_key_far_from_its_limit_is_counted_in_claims_of_many_calls_per_update(
    aws: AwsStack,
) -> None:
    quotas = counters(aws)
    quota = Quota(calls_per_minute=100_000)
    sent = updates_made(aws)
    assert all(admitted(quotas, "key:busy", quota) for _ in range(320))
    assert len(sent) <= 20  # one to learn the window, then claims of up to 32 calls
    counted = quotas.usage("key:busy")["calls_this_minute"]
    assert 320 <= counted < 320 + 32  # claimed and not yet used: less than one claim


def test_a_process_calling_about_once_a_second_claims_nothing_beyond_its_calls(
    aws: AwsStack,
) -> None:
    clock = Clock()
    quotas = counters(aws, clock)
    quota = Quota(calls_per_minute=100_000)
    for _ in range(5):
        quotas.admit("key:calm", quota)
        clock.now += 1.5
    clock.now -= 1.5
    # Claims follow this process's own rate: an idle process strands no calls in the window.
    assert quotas.usage("key:calm")["calls_this_minute"] == 5


def test_two_processes_claiming_from_one_window_admit_exactly_its_limit_together(
    aws: AwsStack,
) -> None:
    clock = Clock()
    first, second = counters(aws, clock), counters(aws, clock)
    quota = Quota(calls_per_minute=700)

    def until_refused(quotas: QuotaCounters) -> int:
        count = 0
        while admitted(quotas, "key:shared", quota):
            count += 1
        return count

    with ThreadPoolExecutor(max_workers=4) as pool:
        counts = list(pool.map(until_refused, [first, second, first, second]))
    assert sum(counts) == 700  # each stops only when its own claims are spent too
    assert first.usage("key:shared")["calls_this_minute"] == 700


def test_a_call_given_back_while_claiming_is_kept_for_the_next_call(aws: AwsStack) -> None:
    quotas = counters(aws)
    quota = Quota(calls_per_minute=10_000)
    for _ in range(2):  # the second call claims two: one admitted, one kept
        quotas.admit("key:back", quota)
    counted = quotas.usage("key:back")["calls_this_minute"]
    sent = updates_made(aws)
    quotas.release("key:back", quota)
    quotas.admit("key:back", quota)
    assert sent == []  # given back to this process's claim, and taken from it again
    assert quotas.usage("key:back")["calls_this_minute"] == counted


def test_subjects_are_counted_apart(aws: AwsStack) -> None:
    quotas = counters(aws)
    quota = Quota(calls_per_minute=1)
    assert admitted(quotas, "key:a", quota)
    assert admitted(quotas, "key:b", quota)
    assert not admitted(quotas, "key:a", quota)


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ({"calls_per_minute": 0}, "calls_per_minute"),
        ({"calls_per_minute": True}, "calls_per_minute"),
        ({"run_seconds_per_day": -1}, "run_seconds_per_day"),
        ({"per_hour": 3}, "per_hour"),
    ],
)
def test_bad_quota_settings_name_the_field(value: object, field: str) -> None:
    with pytest.raises(QuotaRuleError, match=f"quota.{field}: "):
        check_quota(value)


def test_a_busy_key_claims_run_seconds_in_blocks_not_two_writes_per_call(aws: AwsStack) -> None:
    """A key's DAY item once took two updates per call (admit, charge): ~500 calls/s."""
    clock = Clock()
    quotas = counters(aws, clock)
    quota = Quota(run_seconds_per_day=36_000.0)
    sent = updates_made(aws)
    for _ in range(400):  # 100 calls a second of 0.1 s runs
        quotas.admit("key:runs", quota)
        quotas.charge("key:runs", 0.1)
        clock.now += 0.01
    assert len(sent) <= 40, f"{len(sent)} updates of the DAY item for 400 calls"
    used = quotas.usage("key:runs")["run_seconds_today"]
    assert 40.0 <= used <= 40.0 + 10.0 + 0.5  # claimed and not yet used: under one block


def test_run_seconds_claimed_in_blocks_never_admit_past_the_limit_by_more_than_one_run(
    aws: AwsStack,
) -> None:
    clock = Clock()
    processes = (counters(aws, clock), counters(aws, clock))
    quota = Quota(run_seconds_per_day=50.0)
    used, refused = 0.0, [False, False]
    for turn in range(4000):
        if all(refused):
            break
        quotas = processes[turn % 2]
        refused[turn % 2] = not admitted(quotas, "view:shared", quota)
        if not refused[turn % 2]:
            quotas.charge("view:shared", 0.1)
            used += 0.1
        clock.now += 0.005
    assert all(refused), "never refused"
    # blocks a process did not use lapse (a little under the limit); one run past it at most
    assert 50.0 - 2.0 <= used <= 50.0 + 2 * 0.1, used
