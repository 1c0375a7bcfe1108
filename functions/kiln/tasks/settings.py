"""How tasks behave: lifetimes, leases, caps. Built by `kiln.settings` from the environment."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TaskSettings:
    ttl_ms: int = 3_600_000  # how long a task stays readable after it was created
    max_ttl_ms: int = 86_400_000  # the most a 2025-11-25 client may ask for
    poll_interval_ms: int = 1000  # what clients are told to wait between polls
    heartbeat_s: float = 5.0  # how often a worker renews its lease
    lease_s: float = 30.0  # a working task whose lease ran out has lost its worker
    start_grace_s: float = 120.0  # how long a new task may wait for its worker to start
    max_running_per_principal: int = 50  # working tasks one caller may have
    max_running_per_process: int = 100  # runs one local worker pool takes on
    worker_function: str | None = None  # AWS: the worker Lambda; None: a local worker pool

    def __post_init__(self) -> None:
        for name in ("ttl_ms", "max_ttl_ms", "poll_interval_ms", "heartbeat_s", "lease_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"TaskSettings.{name} must be positive")
        if self.lease_s <= self.heartbeat_s:
            raise ValueError("TaskSettings.lease_s must be longer than heartbeat_s")
        if self.max_running_per_principal < 1 or self.max_running_per_process < 1:
            raise ValueError("TaskSettings caps on running tasks must be at least 1")
