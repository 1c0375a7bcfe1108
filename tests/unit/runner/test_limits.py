"""Settings validation, per-tool limits that only tighten, and the deadline rule."""

from __future__ import annotations

import pytest

from kiln.runner import RunLimits, RunnerSettings, RunRequest
from kiln.runner.limits import effective_limits
from kiln.runner.runner import deadline_for


def request(timeout_s: float, time_left_s: float | None = None) -> RunRequest:
    return RunRequest(
        language="python", code="", arguments={}, timeout_s=timeout_s, time_left_s=time_left_s
    )


def test_tool_limits_tighten_but_never_loosen_the_servers() -> None:
    settings = RunnerSettings(memory_limit_bytes=1000, file_size_limit_bytes=500)
    limits = effective_limits(settings, RunLimits(memory_bytes=100, file_size_bytes=10_000))
    assert limits.memory_bytes == 100
    assert limits.file_size_bytes == 500


def test_no_tool_limits_means_the_servers_bounds() -> None:
    settings = RunnerSettings()
    limits = effective_limits(settings, None)
    assert limits.open_files == settings.open_files_limit
    assert limits.stdout_cap_bytes == 1024 * 1024
    assert limits.stderr_cap_bytes == 64 * 1024


@pytest.mark.parametrize("value", [0, -1, 1.5])
def test_a_tool_limit_must_be_a_positive_integer(value: object) -> None:
    with pytest.raises(ValueError, match=r"RunLimits.open_files must be a positive integer"):
        RunLimits(open_files=value)  # type: ignore[arg-type]


def test_settings_reject_a_zero_concurrency() -> None:
    with pytest.raises(ValueError, match=r"RunnerSettings.max_concurrent_runs must be positive"):
        RunnerSettings(max_concurrent_runs=0)


def test_deadline_is_the_tools_limit_when_time_is_plenty() -> None:
    d = deadline_for(request(5, time_left_s=60), RunnerSettings(), waited_s=0)
    assert (d.seconds, d.source) == (5, "tool")


def test_deadline_keeps_a_margin_before_the_invocation_ends() -> None:
    d = deadline_for(request(30, time_left_s=10), RunnerSettings(answer_margin_s=1.5), waited_s=2)
    assert (d.seconds, d.source) == (6.5, "invocation")


def test_deadline_without_time_left_ignores_the_invocation() -> None:
    d = deadline_for(request(5000), RunnerSettings(max_timeout_s=900), waited_s=0)
    assert (d.seconds, d.source) == (900, "server")


def test_deadline_is_never_negative() -> None:
    d = deadline_for(request(30, time_left_s=0.3), RunnerSettings(), waited_s=0)
    assert (d.seconds, d.source) == (0.0, "invocation")
