"""The error a build ends with when it produces no bundle (every installer raises it)."""

from __future__ import annotations


class BuildError(Exception):
    """A build that did not produce a bundle; `log` is everything the tools printed."""

    def __init__(self, reason: str, log: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.log = log
