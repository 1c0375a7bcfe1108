"""The runner function's telemetry, without Powertools: stdlib logging and one EMF line.

A new tenant's first call pays for every module the runner function's init imports
(bench/runner/new_tenant.py), and Powertools' Logger and Metrics were ~11-17 ms of it for
what the runner uses of them: it writes no line of its own per run (bench/cost: runner log
0 B), only warnings and errors (a refused payload, a failed sweep; a failed run at INFO)
through stdlib `logging`, and one metric, `ColdStart`.

- Log lines go to the runtime's own handler on the root logger (awslambdaric): as JSON with
  `requestId` and `tenantId` under Lambda's JSON log format (template.yaml's LoggingConfig),
  as text with the request id otherwise. Kiln's loggers log at INFO, or DEBUG when Lambda's
  application log level says so (the runtime sets the root logger's level from it); Lambda
  drops what is below that level itself. (Under Powertools the same records were its JSON:
  `function_request_id` where the runtime writes `requestId`; POWERTOOLS_LOG_LEVEL no longer
  applies to the runner.)
- `ColdStart` is the line Powertools' `capture_cold_start_metric` wrote, the same document,
  written by the first invocation of the environment.

With KILN_TRACING on, the runner is instrumented with Powertools as the other functions are
(`telemetry.instrument`): the X-Ray Tracer is Powertools'.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Callable
from typing import Any

Handler = Callable[[dict[str, Any], Any], Any]


def cold_start_line(namespace: str, service: str, function_name: str) -> str:
    """The EMF document of one `ColdStart` (Count 1, dimensions function_name and service)."""
    metric = {"Namespace": namespace, "Dimensions": [["function_name", "service"]],
              "Metrics": [{"Name": "ColdStart", "Unit": "Count"}]}  # fmt: skip
    document = {"_aws": {"Timestamp": int(time.time() * 1000), "CloudWatchMetrics": [metric]},
                "function_name": function_name, "service": service, "ColdStart": [1.0]}  # fmt: skip
    return json.dumps(document, separators=(",", ":")) + "\n"


def instrument(handler: Handler, *, namespace: str, service: str) -> Handler:
    """`handler`, writing `ColdStart` before its first invocation; Kiln's loggers at INFO."""
    logging.getLogger("kiln").setLevel(min(logging.INFO, logging.getLogger().level or logging.INFO))
    cold = [True]

    def handle(event: dict[str, Any], context: Any) -> Any:
        if cold:
            cold.clear()
            name = str(getattr(context, "function_name", "") or "")
            sys.stdout.write(cold_start_line(namespace, service, name))
            sys.stdout.flush()
        return handler(event, context)

    return handle
