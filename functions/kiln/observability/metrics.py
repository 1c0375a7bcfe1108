"""The HTTP entry points' EMF metrics, added up per container and written at most every N s.

Every request keeps its own log line (`telemetry._record`: method, tool, outcome, duration).
Its metrics are added to the container's running batch instead of riding on that line as two
EMF metric sets (about 330 bytes a request, which cost as much as the request's compute):

- `Requests` (dimension `service`), and per tool (dimensions `service`, `tool`) `ToolCalls`,
  `ToolErrors` (timeouts included), `ToolTimeouts` as sums, and `ToolDuration` as the list
  of each call's milliseconds (EMF takes up to 100 values a metric: every call stays a sample,
  so averages and percentiles are exact).
- A batch is written when a request finds the last write `flush_s` or more ago (the request
  itself included), when a tool's durations reach 100, and before a request of a new minute
  (a batch never spans two minutes, and carries the time of its first request: per-minute
  metrics land in the minute their requests came in). Lambda freezes a container between
  invocations, so nothing is written between requests: no timer, no thread.
- So a container that serves a request after a quiet spell of `flush_s` writes its metrics
  at once (as before), and a busy one writes one batch per `flush_s`.

What it changes: sums (`ToolCalls`, `Requests`, ...) are exact, but their SampleCount is the
number of batches, not of requests (count calls with Sum). What can be lost: the batch a
container holds when Lambda stops it (after a burst, or idle for minutes): its requests of
the last `flush_s` at most (10 s by default, `KILN_METRICS_FLUSH_S`; 0 writes with every
request). Their log lines are written either way, so a Logs Insights count over the
`request` lines is exact.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

MAX_VALUES = 100  # EMF: at most 100 values for one metric in one document
COUNTS = {"ToolCalls": "Count", "ToolErrors": "Count", "ToolTimeouts": "Count"}


@dataclass
class _ToolCounts:
    calls: int = 0
    errors: int = 0
    timeouts: int = 0
    durations: list[float] = field(default_factory=list)


class MetricBatch:
    """One container's metrics since its last write; `add` returns the EMF documents due."""

    def __init__(
        self,
        namespace: str,
        service: str,
        flush_s: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.namespace, self.service, self.flush_s = namespace, service, flush_s
        self.clock = clock
        self.requests = 0
        self.tools: dict[str, _ToolCounts] = {}
        self.since: float | None = None  # when the batch's first request came
        self.written = -math.inf  # when a batch was last written

    def add(self, tool: str | None, outcome: str, duration_ms: float) -> list[dict[str, Any]]:
        """Count one request (`tool`: a tool that ran, else None); the documents to write now."""
        now = self.clock()
        due: list[dict[str, Any]] = []
        if self.since is not None and int(now // 60) != int(self.since // 60):
            due = self.documents()  # the minute before's batch, stamped in that minute
        if self.since is None:
            self.since = now
        self.requests += 1
        full = False
        if tool is not None:
            counts = self.tools.setdefault(tool, _ToolCounts())
            counts.calls += 1
            counts.errors += outcome in ("error", "timeout")
            counts.timeouts += outcome == "timeout"
            counts.durations.append(duration_ms)
            full = len(counts.durations) >= MAX_VALUES
        if full or now - self.written >= self.flush_s:
            due += self.documents()
            self.written = now
        return due

    def documents(self) -> list[dict[str, Any]]:
        """The batch as EMF documents (one for `Requests`, one per tool); the batch restarts."""
        if self.since is None:
            return []
        stamp = int(self.since * 1000)
        found = [
            self._document(stamp, {"Requests": self.requests}, {"Requests": "Count"}, ["service"])
        ]
        for tool, counts in self.tools.items():
            values: dict[str, Any] = {"tool": tool, "ToolCalls": counts.calls,
                                      "ToolErrors": counts.errors,
                                      "ToolTimeouts": counts.timeouts,
                                      "ToolDuration": _one_or_all(counts.durations)}  # fmt: skip
            units = {**COUNTS, "ToolDuration": "Milliseconds"}
            found.append(self._document(stamp, values, units, ["service", "tool"]))
        self.requests, self.tools, self.since = 0, {}, None
        return found

    def _document(
        self, stamp: int, values: dict[str, Any], units: dict[str, str], dimensions: list[str]
    ) -> dict[str, Any]:
        metrics = [{"Name": name, "Unit": unit} for name, unit in units.items()]
        metric_set = {"Namespace": self.namespace, "Dimensions": [dimensions], "Metrics": metrics}
        return {"level": "INFO", "message": "metrics", "service": self.service, **values,
                "_aws": {"Timestamp": stamp, "CloudWatchMetrics": [metric_set]}}  # fmt: skip


def _one_or_all(values: list[float]) -> float | list[float]:
    return values[0] if len(values) == 1 else list(values)
