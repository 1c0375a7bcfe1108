"""The runner function's handler, driven line by line: `python runner_function_driver.py MODE`.

Made to run in a world of its own (`private_world.py`), as the handler runs on Lambda: it
builds a `RunnerFunction`, with MODE `LOW-HIGH` a uid of that range per run where it may
switch uids, with MODE `shared` every run under its own uid and no Landlock fence (Lambda
where the kernel refuses Landlock: what a run leaves in /tmp is found by the sweep), says
`{"ready": PID}` once its baseline of the shared temporary directories is taken, then
answers one JSON line per request line on stdin:

- `{"event": ..., "tenant": ...}`: the handler's answer to that invocation, the context
  carrying that tenant id (or none);
- `{"exists": [PATH, ...]}`: which of these paths exist in its world.

Its own stdout carries only these lines; anything else written there goes to stderr.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from typing import Any

from kiln.runner import RunnerSettings
from kiln.serving.runner_function import RunnerFunction


@dataclass
class Context:
    tenant_id: str | None = None

    def get_remaining_time_in_millis(self) -> int:
        return 20_000


def answer(function: RunnerFunction, request: dict[str, Any]) -> dict[str, Any]:
    if "exists" in request:
        return {"exists": {path: os.path.lexists(path) for path in request["exists"]}}
    return function.handle(request["event"], Context(request.get("tenant")))


def settings(mode: str) -> RunnerSettings:
    if mode == "shared":
        return RunnerSettings(run_uids=None, landlock=False)
    low, high = mode.split("-")
    return RunnerSettings(run_uids=(int(low), int(high)))


def main(mode: str) -> None:
    replies = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # a stray print must not break the protocol
    function = RunnerFunction(settings(mode), s3=None, bucket="unused")
    try:
        replies.write(json.dumps({"ready": os.getpid()}) + "\n")
        for line in sys.stdin:
            replies.write(json.dumps(answer(function, json.loads(line))) + "\n")
    finally:
        function.close()


if __name__ == "__main__":
    main(sys.argv[1])
