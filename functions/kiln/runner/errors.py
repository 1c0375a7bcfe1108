"""What the runner raises instead of returning a result."""

from __future__ import annotations


class RunnerBusyError(Exception):
    """Every run slot is taken and the queue is full."""

    def __init__(self, running: int, waiting: int) -> None:
        super().__init__(
            f"busy, try again: {running} tool runs in progress and {waiting} waiting "
            "(the runner's concurrency limit and queue are full)"
        )


class RunSlotRefusedError(Exception):
    """A run from inside another run found no slot within its share: it is not made to wait."""

    def __init__(self, running: int, slots: int, share: str | None) -> None:
        held = f"; {share} already holds its share of them" if share else ""
        super().__init__(
            f"refused at once: all {slots} run slots are taken ({running} running{held}), and "
            "this call comes from a tool's own run (a tool calling Kiln): waiting for a slot "
            "could mean waiting for itself. Call it again later, or not from inside a tool"
        )


class NodeUnavailableError(Exception):
    """No Node.js binary could be found for a Node tool."""


class InvalidArgumentsError(ValueError):
    """The arguments cannot be written to the script as strict JSON."""
