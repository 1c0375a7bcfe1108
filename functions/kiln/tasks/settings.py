"""How tasks behave: lifetimes, leases, caps. Built by `kiln.settings` from the environment."""

from __future__ import annotations

import base64
import binascii
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
    # Approvals that wait for a person (kiln.access.waiting, kiln.tasks.approving): how long
    # one waits before its call ends unrun, and the webhook told of each new one (a Standard
    # Webhooks signed POST; the secret is `whsec_` + base64), tried `attempts` times, waiting
    # `backoff_s`, then twice as long, between tries.
    approval_expiry_s: float = 86_400.0
    approval_webhook_url: str | None = None
    approval_webhook_secret: str | None = None
    approval_webhook_attempts: int = 5
    approval_webhook_backoff_s: float = 2.0

    def __post_init__(self) -> None:
        for name in ("ttl_ms", "max_ttl_ms", "poll_interval_ms", "heartbeat_s", "lease_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"TaskSettings.{name} must be positive")
        if self.lease_s <= self.heartbeat_s:
            raise ValueError("TaskSettings.lease_s must be longer than heartbeat_s")
        if self.approval_expiry_s <= 0 or self.approval_webhook_attempts < 1:
            raise ValueError("TaskSettings.approval_expiry_s and webhook attempts must be positive")
        if self.approval_webhook_url and not self.approval_webhook_secret:
            raise ValueError("an approval webhook needs its secret (KILN_APPROVAL_WEBHOOK_SECRET)")
        if self.approval_webhook_secret is not None:
            _check_webhook_secret(self.approval_webhook_secret)
        if self.max_running_per_principal < 1 or self.max_running_per_process < 1:
            raise ValueError("TaskSettings caps on running tasks must be at least 1")


def _check_webhook_secret(secret: str) -> None:
    """A Standard Webhooks secret: `whsec_` and the base64 of 24 to 64 random bytes."""
    try:
        size = len(base64.b64decode(secret.removeprefix("whsec_"), validate=True))
    except (binascii.Error, ValueError):
        size = 0
    if not secret.startswith("whsec_") or not 24 <= size <= 64:
        raise ValueError(
            "the approval webhook secret must be whsec_ followed by the base64 of 24 to 64 "
            'random bytes; make one with: python3 -c "import base64, os; '
            "print('whsec_' + base64.b64encode(os.urandom(32)).decode())\""
        )
