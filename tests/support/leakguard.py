"""A pytest plugin: fail the session if a planted key or secret shows up in any log line.

Every log record of the session (any logger, INFO and up) is captured as it would be
written. Tests plant the credentials they create with the `planted_secrets` fixture; at the
end the captured lines are searched for each planted value, and any hit fails the run.
"""

from __future__ import annotations

import logging

import pytest

_FORMAT = logging.Formatter("%(name)s %(levelname)s %(message)s")


class Planted:
    def __init__(self) -> None:
        self.values: set[str] = set()

    def add(self, value: str) -> str:
        if len(value) < 8:
            raise ValueError("plant values of 8 characters or more, or the search means nothing")
        self.values.add(value)
        return value


class Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.lines.append(_FORMAT.format(record))
        except Exception:  # a record that cannot be formatted is not written either
            self.lines.append(str(record.msg))


_planted = Planted()
_capture = Capture()


def leaks(lines: list[str], planted: set[str]) -> list[tuple[str, str]]:
    return [(value, line) for line in lines for value in planted if value in line]


def pytest_configure(config: pytest.Config) -> None:
    root = logging.getLogger()
    root.addHandler(_capture)
    if root.level > logging.INFO or root.level == logging.NOTSET:
        root.setLevel(logging.INFO)


@pytest.fixture(scope="session")
def planted_secrets() -> Planted:
    return _planted


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    found = leaks(_capture.lines, _planted.values)
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if found:
        if reporter is not None:
            reporter.write_sep("=", "planted secrets found in log output", red=True)
            for value, line in found[:20]:
                masked = value[:6] + "…"
                reporter.write_line(f"{masked}: {line.replace(value, '<PLANTED>')[:300]}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    elif reporter is not None and _planted.values:
        reporter.write_line(
            f"leakguard: {len(_planted.values)} planted secrets, "
            f"{len(_capture.lines)} log lines, no leak"
        )
