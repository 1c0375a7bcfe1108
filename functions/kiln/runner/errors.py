"""What the runner raises instead of returning a result."""

from __future__ import annotations


class RunnerBusyError(Exception):
    """Every run slot is taken and the queue is full."""

    def __init__(self, running: int, waiting: int) -> None:
        super().__init__(
            f"busy, try again: {running} tool runs in progress and {waiting} waiting "
            "(the runner's concurrency limit and queue are full)"
        )


class NodeUnavailableError(Exception):
    """No Node.js binary could be found for a Node tool."""


class InvalidArgumentsError(ValueError):
    """The arguments cannot be written to the script as strict JSON."""
