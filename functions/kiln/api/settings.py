"""What the HTTP edge reads of the configuration. Built by `kiln.settings` from the
environment (`Settings.api`), held by `kiln.stack.Kiln.api_settings`; the variables are
named there."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ApiSettings:
    allowed_origins: tuple[str, ...] = ()  # browsers on these may call (CORS); others: 403
    loopback_bind: bool = False  # served on loopback only: a foreign Host is refused (421)
    max_body_bytes: int = 1024 * 1024  # a larger request body is refused (413)
    local_time_budget_s: float = 60.0  # "time left" of a request outside Lambda
    node_binary: str | None = None  # checks a Node tool's syntax (/api/tools/validate)
