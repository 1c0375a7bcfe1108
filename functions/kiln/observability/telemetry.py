"""Logs, metrics and optional traces around the Lambda entry points (AWS Lambda Powertools).

Every HTTP invocation writes one compact JSON line (logs are billed by the byte, and cost
about as much as a call's compute): the request's log fields (request id, MCP method, tool,
outcome, duration). Its EMF metrics (`Requests` always, and for a `tools/call` that ran the
per-tool `ToolCalls`, `ToolErrors` (timeouts included), `ToolTimeouts` and `ToolDuration`)
are added up per container and written at most every `metrics_flush_s` (see
`kiln.observability.metrics`, which says what that changes and what a stopped container
loses). `ColdStart` goes on a line of its own, on the first invocation of a container. What
happened is what the protocol found the request to be (`Invocation.hear`): no body is parsed
here.
"""

from __future__ import annotations

import json
import sys
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from aws_lambda_powertools import Logger, Metrics

from kiln.observability.metrics import MetricBatch

Handler = Callable[[dict[str, Any], Any], Any]

# API Gateway HTTP APIs cut every integration at 30 s, whatever the function's own limit.
HTTP_API_LIMIT_MS = 30_000
MAX_LOGGED_NAME = 128


class Telemetry:
    """Where one process's logs, metrics and traces go: service and namespace come from
    `Settings` (POWERTOOLS_*, KILN_TRACING; template.yaml sets them for every function,
    and the defaults serve sam local and tests)."""

    def __init__(
        self,
        service: str = "kiln",
        namespace: str = "Kiln",
        *,
        tracing: bool = False,
        metrics_flush_s: float = 10.0,
    ):
        self.service = service
        self.namespace = namespace
        self.tracing = tracing
        self.logger = Logger(service=service)
        self.metrics = Metrics(namespace=namespace, service=service)
        self.batch = MetricBatch(namespace, service, metrics_flush_s)


@dataclass(frozen=True)
class RequestInfo:
    method: str | None
    tool: str | None


class Heard(Protocol):
    """What the app found a request to be (it is `kiln.protocol.backend.Seen`)."""

    @property
    def method(self) -> str | None: ...
    @property
    def tool(self) -> str | None: ...
    @property
    def outcome(self) -> str | None: ...


class Invocation:
    """The Lambda context as the app sees it (Mangum's scope["aws.context"]), with `hear`:
    the MCP route hands it what the protocol finds the request to be, so the log line is
    written from that and no body is parsed here."""

    def __init__(self, context: Any) -> None:
        self._context = context
        self.heard: Heard | None = None

    def hear(self, heard: Heard) -> None:
        self.heard = heard

    def __getattr__(self, name: str) -> Any:
        return getattr(self._context, name)


def describe(heard: Heard | None, response: Mapping[str, Any]) -> tuple[RequestInfo, str]:
    """The request's method and tool, and its outcome: `ok`, `error` (an isError result),
    `timeout` (a run killed at its limit) or `rejected` (a request that never reached a tool:
    a JSON-RPC error or an HTTP error)."""
    status = response.get("statusCode", 200)
    failed = isinstance(status, int) and status >= 400
    if heard is None:  # not MCP, or refused before the protocol read it
        return RequestInfo(None, None), "rejected" if failed else "ok"
    outcome = heard.outcome or ("rejected" if failed else "ok")
    return RequestInfo(heard.method, heard.tool), outcome


class FrontDoorContext:
    """The Lambda context, with the time left cut to what the HTTP API in front still allows.

    A call through the HTTP API is dropped by API Gateway at 30 s even when the function may
    run longer; the runner must answer before that. Function URL calls keep the whole limit.
    """

    def __init__(self, context: Any, api_deadline_ms: int) -> None:
        self._context = context
        self._api_deadline_ms = api_deadline_ms

    def get_remaining_time_in_millis(self) -> int:
        api_left = self._api_deadline_ms - int(time.time() * 1000)
        return max(0, min(int(self._context.get_remaining_time_in_millis()), api_left))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._context, name)


def front_door_context(event: Mapping[str, Any], context: Any) -> Any:
    """Wrap `context` for HTTP API events; Function URL and other events pass through."""
    request_context = event.get("requestContext")
    if not isinstance(request_context, dict) or context is None:
        return context
    domain = str(request_context.get("domainName", ""))
    started_ms = request_context.get("timeEpoch")
    if ".lambda-url." in domain or not isinstance(started_ms, int):
        return context
    api_deadline_ms = started_ms + HTTP_API_LIMIT_MS
    # A replayed event (sam local invoke -e, a test) carries an old timeEpoch: the API that
    # sent it is long gone, so only the function's own limit counts.
    if not 0 < api_deadline_ms - time.time() * 1000 <= HTTP_API_LIMIT_MS:
        return context
    return FrontDoorContext(context, api_deadline_ms)


def http_handler(adapter: Handler, *, name: str, telemetry: Telemetry) -> Handler:
    """An HTTP entry point: `adapter` (Mangum) wrapped with logging, metrics and traces."""

    def handle(event: dict[str, Any], context: Any) -> Any:
        request = RequestInfo(None, None)
        started = time.perf_counter()
        outcome = "crashed"  # replaced below unless the adapter raises
        try:
            invocation = Invocation(front_door_context(event, context))
            response = adapter(event, invocation)
            request, outcome = describe(invocation.heard, response)
            return response
        finally:
            duration_ms = round((time.perf_counter() - started) * 1000, 1)
            request_id = getattr(context, "aws_request_id", None)
            _record(telemetry, name, request, outcome, duration_ms, request_id)

    return instrument(handle, name=name, telemetry=telemetry)


def instrument(handler: Handler, *, name: str, telemetry: Telemetry) -> Handler:
    """Request id in every log line, EMF metrics flushed per invocation, optional tracing."""
    # Kiln's own metrics go out in its batch (kiln.observability.metrics): the decorator, kept
    # for the cold-start metric, has none, and would say so in a warning on every cold start
    # (formatting it reads powertools' source file: ~4 ms of the public function's first answer).
    warnings.filterwarnings("ignore", message="No application metrics to publish")
    wrapped = telemetry.metrics.log_metrics(handler, capture_cold_start_metric=True)
    wrapped = telemetry.logger.inject_lambda_context(wrapped, clear_state=True)
    if telemetry.tracing:
        # Importing the Tracer (and the X-Ray SDK) costs ~0.6 s of cold start: only on demand.
        from aws_lambda_powertools import Tracer

        wrapped = Tracer(service=telemetry.service).capture_lambda_handler(wrapped)
    return wrapped


def _record(
    telemetry: Telemetry,
    name: str,
    request: RequestInfo,
    outcome: str,
    duration_ms: float,
    request_id: str | None,
) -> None:
    """The request's line, after the container's metrics when they are due."""
    line: dict[str, Any] = {"level": "INFO", "message": "request", "entry": name,
                            "outcome": outcome, "duration_ms": duration_ms,
                            "function_request_id": request_id}  # fmt: skip
    if request.method:
        line["method"] = request.method
    if request.tool is not None:
        line["tool"] = request.tool[:MAX_LOGGED_NAME]
    # Only tools that ran get a metric dimension: a made-up name must not mint a new series.
    ran = line.get("tool") if outcome != "rejected" else None
    due = telemetry.batch.add(ran, outcome, duration_ms)
    text = "".join(json.dumps(doc, separators=(",", ":")) + "\n" for doc in [*due, line])
    sys.stdout.write(text)
    sys.stdout.flush()
