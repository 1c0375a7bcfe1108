"""Counting a tool's runs from the runner's own log records (tool label `name@revision`)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager


class Runs(logging.Handler):
    """Runs of each tool by name, as the runner logs them."""

    def __init__(self) -> None:
        super().__init__()
        self.of: dict[str, int] = {}

    def emit(self, record: logging.LogRecord) -> None:
        name = str(getattr(record, "tool", "")).partition("@")[0]
        if name:
            self.of[name] = self.of.get(name, 0) + 1


@contextmanager
def counting_runs() -> Iterator[Runs]:
    """The runs of the tools this process's runner starts meanwhile (a clean run's line is
    written at DEBUG: the runner's log level is lowered while counting)."""
    counter = Runs()
    runner_log = logging.getLogger("kiln.runner")
    level = runner_log.level
    runner_log.setLevel(logging.DEBUG)
    runner_log.addHandler(counter)
    try:
        yield counter
    finally:
        runner_log.removeHandler(counter)
        runner_log.setLevel(level)
