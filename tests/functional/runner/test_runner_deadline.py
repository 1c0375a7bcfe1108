"""Which limit applies, and what the result says about it."""

from __future__ import annotations

import re
import time

from kiln.runner import contract_text
from support.runner import Harness
from support.runner import harness_fixture as harness_fixture

SLEEP = "import time\ntime.sleep(60)\n"


def test_time_left_in_the_invocation_shorter_than_the_tool_limit_wins(harness: Harness) -> None:
    result = harness.run(SLEEP, timeout_s=30, time_left_s=2.0)  # margin 1.0 s
    # The margin, less what setting the run up took (a loaded machine takes longer).
    assert 0.5 < result.applied_timeout_s <= 1.0
    assert result.limit_source == "invocation"
    assert re.fullmatch(
        r"\(no output\)\n\[timeout\] killed after (1\.0|0\.\d+) s \(time left in the invocation\)",
        contract_text(result),
    )
    harness.assert_clean()


def test_tool_limit_shorter_than_the_time_left_wins(harness: Harness) -> None:
    result = harness.run(SLEEP, timeout_s=0.5, time_left_s=100)
    assert result.limit_source == "tool"
    assert contract_text(result).endswith("[timeout] killed after 0.50 s (the tool's limit)")
    harness.assert_clean()


def test_server_maximum_caps_a_tool_asking_for_more(harness: Harness) -> None:
    capped = harness.with_settings(max_timeout_s=0.5)
    result = capped.run(SLEEP, timeout_s=3600)
    assert result.limit_source == "server"
    assert contract_text(result).endswith("[timeout] killed after 0.50 s (the server's maximum)")
    harness.assert_clean()


def test_no_time_left_refuses_at_once_without_starting(harness: Harness) -> None:
    marker_file = harness.shared / "started"
    code = f"open({str(marker_file)!r}, 'w').close()\n"
    started = time.monotonic()
    result = harness.run(code, timeout_s=30, time_left_s=0.8)
    assert time.monotonic() - started < 10.0  # not the 30 s a started run could take
    assert not result.started
    assert result.timed_out
    assert result.applied_timeout_s == 0.0
    assert (
        contract_text(result)
        == "(no output)\n[timeout] not started: no time was left in the invocation"
    )
    assert not marker_file.exists()
    harness.assert_clean()


def test_a_quick_script_is_not_held_to_its_deadline(harness: Harness) -> None:
    result = harness.run("print('fast')", timeout_s=30)
    assert not result.timed_out
    assert result.duration_s < 10  # well inside its 30 s
    harness.assert_clean()
