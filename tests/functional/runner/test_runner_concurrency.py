"""Runs never block the event loop; a full queue is refused at once, not left hanging."""

from __future__ import annotations

import asyncio
import time

import pytest

from kiln.runner import RunnerBusyError, contract_text
from runner_helpers import Harness
from runner_helpers import harness_fixture as harness_fixture

WAIT_FOR_GO = (
    "import os, time\n"
    "go = os.path.join(os.environ['SHARED_DIR'], 'go')\n"
    "while not os.path.exists(go):\n    time.sleep(0.01)\n"
    "print('done')\n"
)


async def until(predicate: object, timeout_s: float = 5.0) -> None:
    give_up = time.monotonic() + timeout_s
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < give_up, "condition not met in time"
        await asyncio.sleep(0.005)


def test_full_queue_is_refused_at_once_with_busy_try_again(harness: Harness) -> None:
    busy = harness.with_settings(max_concurrent_runs=1, max_queue=1)

    async def scenario() -> list[str]:
        running = asyncio.create_task(busy.runner.run(busy.request(WAIT_FOR_GO)))
        queued = asyncio.create_task(busy.runner.run(busy.request(WAIT_FOR_GO)))
        await until(lambda: busy.runner.running == 1 and busy.runner.waiting == 1)
        started = time.monotonic()
        with pytest.raises(
            RunnerBusyError, match=r"^busy, try again: 1 tool runs in progress and 1 waiting"
        ):
            await busy.runner.run(busy.request("print('never runs')"))
        assert time.monotonic() - started < 1.0  # no slot can free up before "go" exists
        (busy.shared / "go").touch()
        return [contract_text(r) for r in await asyncio.gather(running, queued)]

    assert asyncio.run(scenario()) == ["done", "done"]
    busy.assert_clean()


def test_without_a_queue_the_second_caller_is_refused(harness: Harness) -> None:
    busy = harness.with_settings(max_concurrent_runs=1, max_queue=0)

    async def scenario() -> str:
        running = asyncio.create_task(busy.runner.run(busy.request(WAIT_FOR_GO)))
        await until(lambda: busy.runner.running == 1)
        with pytest.raises(RunnerBusyError):
            await busy.runner.run(busy.request("print('never runs')"))
        (busy.shared / "go").touch()
        return contract_text(await running)

    assert asyncio.run(scenario()) == "done"
    busy.assert_clean()


def test_eight_slow_tools_run_at_once_while_the_event_loop_stays_responsive(
    harness: Harness,
) -> None:
    # Without root (CI runners) runs share one uid and go one at a time unless told otherwise.
    wide = harness.with_settings(max_concurrent_runs=8, serialize_shared_uid_runs=False)
    slow = "import time\ntime.sleep(1.0)\nprint('slept')\n"

    async def scenario() -> tuple[list[str], float, float]:
        gaps: list[float] = []
        stop = asyncio.Event()

        async def ticker() -> None:
            last = time.monotonic()
            while not stop.is_set():
                await asyncio.sleep(0.002)
                now = time.monotonic()
                gaps.append(now - last)
                last = now

        tick = asyncio.create_task(ticker())
        started = time.monotonic()
        results = await asyncio.gather(*(wide.runner.run(wide.request(slow)) for _ in range(8)))
        elapsed = time.monotonic() - started
        stop.set()
        await tick
        return [contract_text(r) for r in results], elapsed, max(gaps)

    texts, elapsed, worst_gap = asyncio.run(scenario())
    assert texts == ["slept"] * 8
    assert elapsed < 3.0  # all eight at once, not one after another (8 s)
    assert worst_gap < 0.25, f"the event loop stalled for {worst_gap * 1000:.0f} ms"
    wide.assert_clean()


def test_queued_time_counts_against_the_invocations_time_left(harness: Harness) -> None:
    single = harness.with_settings(max_concurrent_runs=1, answer_margin_s=0.0)

    async def scenario() -> float:
        first = asyncio.create_task(single.runner.run(single.request(WAIT_FOR_GO)))
        await until(lambda: single.runner.running == 1)
        second = asyncio.create_task(
            single.runner.run(single.request("print('late')", time_left_s=5.0))
        )
        await until(lambda: single.runner.waiting == 1)
        await asyncio.sleep(0.5)
        (single.shared / "go").touch()
        await first
        return (await second).applied_timeout_s

    applied = asyncio.run(scenario())
    assert 3.0 < applied < 4.6
    single.assert_clean()
