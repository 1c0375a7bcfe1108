"""Runs never block the event loop; a full queue is refused at once, not left hanging."""

from __future__ import annotations

import asyncio
import gc
import logging
import time

import pytest

from kiln.runner import RunnerBusyError, contract_text
from support.runner import Harness
from support.runner import harness_fixture as harness_fixture

BLOCKING_S = 0.5  # far above any callback of the run path, far below a blocking wait

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
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    # Without root (CI runners) runs share one uid and go one at a time unless told otherwise.
    wide = harness.with_settings(max_concurrent_runs=8, serialize_shared_uid_runs=False)
    slow = "import time\ntime.sleep(1.0)\nprint('slept')\n"

    async def scenario() -> list[str]:
        # asyncio's debug mode names every callback that held the loop longer than this: a
        # blocking call on the run path (a wait, a sleep, a file walk) shows up here by name.
        # Wall-clock gaps between ticks would also count a loaded machine's scheduling.
        loop = asyncio.get_running_loop()
        loop.set_debug(True)
        loop.slow_callback_duration = BLOCKING_S
        runs = [wide.runner.run(wide.request(slow)) for _ in range(8)]
        return [contract_text(r) for r in await asyncio.gather(*runs)]

    gc.disable()  # a full collection of the test process's heap is not the runner's doing
    try:
        with caplog.at_level(logging.WARNING, logger="asyncio"):
            texts = asyncio.run(scenario())
    finally:
        gc.enable()
    assert texts == ["slept"] * 8
    blocked = [r.getMessage() for r in caplog.records if "took" in r.getMessage()]
    assert blocked == [], f"the event loop was held by: {blocked[:2]}"
    assert wide.runner.running == 0
    wide.assert_clean()


def test_eight_slow_tools_overlap_instead_of_queueing(harness: Harness) -> None:
    wide = harness.with_settings(max_concurrent_runs=8, serialize_shared_uid_runs=False)
    # Each run waits until all eight are running at once: one after another would never end.
    together = (
        "import os, time\n"
        "d = os.environ['SHARED_DIR']\n"
        "open(os.path.join(d, 'in-' + str(os.getpid())), 'w').close()\n"
        "while len([n for n in os.listdir(d) if n.startswith('in-')]) < 8:\n"
        "    time.sleep(0.01)\n"
        "print('met')\n"
    )

    async def scenario() -> list[str]:
        runs = [wide.runner.run(wide.request(together, time_left_s=60.0)) for _ in range(8)]
        return [contract_text(r) for r in await asyncio.gather(*runs)]

    assert asyncio.run(scenario()) == ["met"] * 8
    wide.assert_clean()


def test_queued_time_counts_against_the_invocations_time_left(harness: Harness) -> None:
    single = harness.with_settings(max_concurrent_runs=1, answer_margin_s=0.0)

    async def scenario() -> float:
        first = asyncio.create_task(single.runner.run(single.request(WAIT_FOR_GO)))
        await until(lambda: single.runner.running == 1)
        second = asyncio.create_task(
            single.runner.run(single.request("print('late')", time_left_s=30.0, timeout_s=60.0))
        )
        await until(lambda: single.runner.waiting == 1)
        await asyncio.sleep(0.5)
        (single.shared / "go").touch()
        await first
        return (await second).applied_timeout_s

    applied = asyncio.run(scenario())
    assert 20.0 < applied <= 29.5  # the half second (at least) it waited was taken off
    single.assert_clean()
