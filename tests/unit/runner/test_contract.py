"""contract_text: the exact MCP text of a run result."""

from __future__ import annotations

from typing import Any

import pytest

from kiln.runner import RunResult, contract_text
from kiln.runner.contract import format_seconds


def result(**fields: Any) -> RunResult:
    base: dict[str, Any] = {
        "stdout": "",
        "stderr": "",
        "exit_code": 0,
        "timed_out": False,
        "applied_timeout_s": 30.0,
        "duration_s": 0.1,
    }
    base.update(fields)
    return RunResult(**base)


def test_seed_exit_7_example() -> None:
    r = result(stderr="failure details\n", exit_code=7)
    assert contract_text(r) == "(no output)\n[stderr] failure details\n[exit 7]"


def test_clean_run_is_just_stdout_without_its_trailing_newline() -> None:
    assert contract_text(result(stdout='{"ok": true}\n')) == '{"ok": true}'


def test_only_trailing_line_breaks_are_trimmed() -> None:
    assert (
        contract_text(result(stdout="  indented\n\nlast line  \r\n\n"))
        == "  indented\n\nlast line  "
    )


@pytest.mark.parametrize("stdout", ["", "\n", "  \n\t\n"])
def test_empty_or_blank_stdout_is_no_output(stdout: str) -> None:
    assert contract_text(result(stdout=stdout)) == "(no output)"


def test_whitespace_only_stderr_is_not_shown() -> None:
    assert contract_text(result(stdout="ok\n", stderr="\n  \n")) == "ok"


def test_stderr_of_a_successful_run_follows_stdout() -> None:
    r = result(stdout='{"a": 1}\n', stderr="DeprecationWarning: old\n")
    assert contract_text(r) == '{"a": 1}\n[stderr] DeprecationWarning: old'


def test_multiline_stderr_keeps_its_lines_with_one_prefix() -> None:
    r = result(stderr="line one\nline two\n", exit_code=1)
    assert contract_text(r) == "(no output)\n[stderr] line one\nline two\n[exit 1]"


def test_exit_124_is_an_exit_not_a_timeout() -> None:
    assert contract_text(result(exit_code=124)) == "(no output)\n[exit 124]"
    assert result(exit_code=124).failed


def test_timeout_states_the_tools_limit() -> None:
    r = result(exit_code=None, timed_out=True, applied_timeout_s=2.0)
    assert contract_text(r) == "(no output)\n[timeout] killed after 2.0 s (the tool's limit)"
    assert r.failed


def test_timeout_states_the_invocation_limit_and_keeps_partial_output() -> None:
    r = result(
        stdout="partial\n",
        exit_code=None,
        timed_out=True,
        applied_timeout_s=4.25,
        limit_source="invocation",
    )
    assert contract_text(r) == "partial\n[timeout] killed after 4.2 s (time left in the invocation)"


def test_timeout_states_the_servers_maximum() -> None:
    r = result(exit_code=None, timed_out=True, applied_timeout_s=900.0, limit_source="server")
    assert contract_text(r).endswith("[timeout] killed after 900.0 s (the server's maximum)")


def test_run_refused_for_lack_of_time_says_it_never_started() -> None:
    r = result(
        exit_code=None,
        timed_out=True,
        applied_timeout_s=0.0,
        limit_source="invocation",
        started=False,
    )
    assert (
        contract_text(r) == "(no output)\n[timeout] not started: no time was left in the invocation"
    )


def test_signal_death_is_named() -> None:
    assert contract_text(result(exit_code=-25)) == (
        "(no output)\n[killed by signal SIGXFSZ: file size limit exceeded]"
    )
    assert contract_text(result(exit_code=-10)) == "(no output)\n[killed by signal SIGUSR1]"


def test_truncation_marks_follow_their_stream() -> None:
    r = result(
        stdout="x" * 10,
        stdout_truncated=True,
        stdout_bytes=1000,
        stderr="e" * 4,
        stderr_truncated=True,
        stderr_bytes=50,
        exit_code=3,
    )
    assert contract_text(r) == (
        "xxxxxxxxxx\n[stdout truncated: 10 of 1000 bytes shown]\n"
        "[stderr] eeee\n[stderr truncated: 4 of 50 bytes shown]\n[exit 3]"
    )


def test_truncated_byte_count_is_of_utf8_bytes() -> None:
    r = result(stdout="éé", stdout_truncated=True, stdout_bytes=20)
    assert contract_text(r) == "éé\n[stdout truncated: 4 of 20 bytes shown]"


def test_successful_run_is_not_failed() -> None:
    assert not result(stdout="ok").failed


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(2.0, "2.0"), (0.5, "0.50"), (0.999, "1.0"), (12.34, "12.3"), (0.05, "0.05")],
)
def test_seconds_are_shown_with_sensible_precision(seconds: float, text: str) -> None:
    assert format_seconds(seconds) == text


def test_runner_failure_is_its_own_line_and_an_error() -> None:
    r = result(exit_code=None, runner_error="the run's supervisor ended without reporting")
    assert contract_text(r) == (
        "(no output)\n[runner error] the run's supervisor ended without reporting"
    )
    assert r.failed


def test_a_run_stopped_at_its_disk_quota_says_so_after_what_it_printed() -> None:
    r = result(stdout="writing\n", exit_code=None, disk_quota_bytes=64 * 1024 * 1024)
    assert r.failed
    assert contract_text(r) == (
        "writing\n[disk quota] stopped after writing more than 64 MiB of files (the run's quota)"
    )
