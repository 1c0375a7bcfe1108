"""What the protocol layer is configured with (the app builds this from Kiln's settings)."""

from __future__ import annotations

from dataclasses import dataclass, field

import kiln
from kiln.protocol.inner import CallLimits


@dataclass(frozen=True)
class ProtocolSettings:
    server_name: str = "kiln"
    server_version: str = kiln.__version__
    title: str | None = "Kiln"
    description: str | None = "Small Python and Node scripts served as MCP tools."
    website_url: str | None = None
    instructions: str | None = None
    max_body_bytes: int = 1024 * 1024
    schema_budget_s: float = 1.0  # checking one value against a schema gives up after this
    page_size: int = 100  # one page for typical catalogs; clients page beyond it
    list_ttl_ms: int = 0  # catalog changes show on the next request, so lists go stale at once
    discover_ttl_ms: int = 300_000
    allowed_origins: tuple[str, ...] = ()  # exact origins, e.g. "https://app.example.com"
    loopback_bind: bool = False  # True: only loopback Host names, and loopback Origins allowed
    # False where an HTTP edge has already checked Host and Origin before any credential
    # (kiln.api.middleware, in both apps): each request is checked once.
    check_origin: bool = True
    task_result_wait_s: float = 20.0  # how long 2025-11-25 tasks/result waits for the end
    cursor_secret: bytes = b""  # empty: a random per-process secret (set it when scaled out)
    state_secret: bytes = b""  # seals requestState; empty: random per process (one process only)
    # What tools that call tools may reach (inner.py).
    call_limits: CallLimits = field(default_factory=CallLimits)
