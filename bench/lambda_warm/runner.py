"""The extra invoke: a trivial `tools/call` through mcp -> runner function vs run in mcp itself.

Both sides run under the Lambda profile of tests/e2e (awslambdaric in a sandbox: one uid, no
capabilities, seccomp/Landlock/namespaces refused, the Runtime API on its own loopback) and
against one moto server. "in-process" is the `mcp` function running the tool itself, as
before the runner function; "runner" is `mcp` sending the run to the tenant-isolated runner
function (the Invoke stand-in of tests/e2e/lambda_profile.py, one environment per tool).
Rounds alternate, after warm-up calls, so drift on a loaded machine hits both alike.

usage (as root): python -m bench.lambda_warm.runner [--rounds 60]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

from bench.moto_server import moto_endpoint  # noqa: E402
from tests.e2e.lambda_profile import Environment, lambda_stack  # noqa: E402
from tests.e2e.test_lambda_runtime import answer_body, call_text, event_for, rpc  # noqa: E402
from tests.support.tools import ECHO  # noqa: E402


def seed(endpoint: str, name: str) -> None:
    from kiln.aws.clients import ensure_resources, make_clients
    from kiln.catalog.rules import check_draft
    from kiln.catalog.store import CatalogStore

    clients = make_clients(endpoint_url=endpoint, region="us-east-1")
    ensure_resources(clients, table=name, bucket=name)
    CatalogStore(clients.dynamodb, clients.s3, table=name, bucket=name).create(
        check_draft(ECHO), actor="bench"
    )


def timed(mcp: Environment) -> float:
    started = time.perf_counter()
    body = answer_body(mcp.invoke(event_for("http-api-tools-call.json", CALL), timeout_s=30))
    elapsed = (time.perf_counter() - started) * 1000
    assert call_text(body) == "hi", body
    return elapsed


CALL = rpc("tools/call", {"name": "echo", "arguments": {"text": "hi"}})


def pct(samples: list[float], q: float) -> float:
    return statistics.quantiles(samples, n=100)[int(q) - 1]


def measure(rounds: int) -> dict[str, list[float]]:
    """Milliseconds of `rounds` trivial calls each way, alternating (as root)."""
    with moto_endpoint() as endpoint:
        name = f"kiln-bench-{uuid.uuid4().hex[:8]}"
        seed(endpoint, name)
        store_env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                     "AWS_ENDPOINT_URL": endpoint, "KILN_TABLE": name, "KILN_BUCKET": name,
                     "KILN_PUBLIC_ANONYMOUS": "true"}  # fmt: skip
        samples: dict[str, list[float]] = {"in-process": [], "runner": []}
        with tempfile.TemporaryDirectory(prefix="kiln-bench-runner-") as tmp:
            os.chmod(tmp, 0o755)  # noqa: S103 - the sandboxes write their logs there as root
            local = Environment(Path(tmp) / "local", "mcp", store_env, [endpoint])
            try:
                with lambda_stack(Path(tmp) / "stack", endpoint, name, name) as (remote, _):
                    for _ in range(3):  # warm: the runner environment's cold start, the helpers
                        timed(local), timed(remote)
                    for _ in range(rounds):
                        samples["in-process"].append(timed(local))
                        samples["runner"].append(timed(remote))
            finally:
                local.close()
    return samples


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=60)
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("needs root: the Lambda profile's sandbox makes namespaces", file=sys.stderr)
        return 2
    samples = measure(args.rounds)
    base = statistics.median(samples["in-process"])
    load = ", ".join(f"{v:.1f}" for v in os.getloadavg())
    print(f"load average {load}; {args.rounds} rounds of a trivial tools/call through mcp")
    for label, values in samples.items():
        p50 = statistics.median(values)
        print(f"{label:11s} p50 {p50:7.1f} ms  p99 {pct(values, 99):7.1f} ms  "
              f"{p50 / base:5.2f}x in-process")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
