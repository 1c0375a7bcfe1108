"""Lambda warm path: the public handler under the real runtime interface client, beside the
framework's floor, in one run.

Each function runs as Lambda runs it: `python -m awslambdaric module.handler` in its own
process, fed HTTP API v2 events by the Runtime API stand-in of tests/e2e/runtime_api.py. Kiln
answers `tools/list` and a trivial Python `tools/call` (catalog on a moto server over HTTP);
the floor is a Mangum + FastAPI app whose one route returns a constant. Rounds alternate the
three so drift on a loaded machine hits all alike. Latency is from queueing the event to the
runtime posting the answer (the stand-in's own overhead is in both).

usage: python -m bench.lambda_warm.run [--rounds 200] [--build .aws-sam/build --python PY313]
With --build, Kiln runs from a `sam build` output (McpFunction + DepsLayer, as Lambda lays
them out) on --python, which needs awslambdaric; the floor always runs on this interpreter.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

from tests.e2e.runtime_api import Answer, RuntimeApi  # noqa: E402
from tests.support.tools import ECHO  # noqa: E402

EVENT = json.loads((ROOT / "tests" / "events" / "http-api-tools-list.json").read_text())
FLOOR_APP = """
from fastapi import FastAPI
from fastapi.responses import Response
from mangum import Mangum

app = FastAPI()
BODY = b'{"jsonrpc":"2.0","id":1,"result":{"tools":[]}}'


@app.post("/mcp")
async def constant() -> Response:
    return Response(BODY, media_type="application/json")


handler = Mangum(app, lifespan="off")
"""


def event(message: dict[str, Any]) -> dict[str, Any]:
    data = copy.deepcopy(EVENT)
    data["body"] = json.dumps(message)
    data["requestContext"]["timeEpoch"] = int(time.time() * 1000)
    data["requestContext"]["requestId"] = uuid.uuid4().hex
    data["headers"]["mcp-protocol-version"] = "2025-11-25"
    return data


LIST = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
CALL = {
    "jsonrpc": "2.0",
    "id": 2,
    "method": "tools/call",
    "params": {"name": "echo", "arguments": {"text": "hi"}},
}


@contextmanager
def runtime(
    python: str, handler: str, env: dict[str, str], cwd: Path
) -> Iterator[Callable[[dict[str, Any]], Answer]]:
    """A function process under awslambdaric; yields `invoke(event) -> Answer`."""
    log = (cwd / f"{handler}.log").open("wb")
    with RuntimeApi() as api:
        process = subprocess.Popen(
            [python, "-m", "awslambdaric", handler],
            env={
                "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                "HOME": str(cwd),
                "AWS_LAMBDA_RUNTIME_API": api.address,
                "AWS_LAMBDA_FUNCTION_NAME": "kiln-bench",
                "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
                "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "1024",
                "_HANDLER": handler,
                "AWS_REGION": "us-east-1",
                **env,
            },
            cwd=cwd,
            stdout=log,
            stderr=subprocess.STDOUT,
        )

        def alive() -> bool:
            return process.poll() is None

        try:
            api.wait_ready(120, alive=alive)
            yield lambda e: api.invoke(e, timeout_s=30, alive=alive)
        finally:
            process.kill()
            process.wait(timeout=10)
            log.close()


def timed(invoke: Callable[[dict[str, Any]], Answer], message: dict[str, Any]) -> float:
    started = time.perf_counter()
    answer = invoke(event(message))
    elapsed = time.perf_counter() - started
    if answer.kind != "response" or answer.payload.get("statusCode") != 200:
        raise SystemExit(f"bad answer: {answer.payload}")
    body = json.loads(answer.payload["body"])
    if "result" not in body or body["result"].get("isError"):
        raise SystemExit(f"bad answer: {body}")
    return elapsed


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def seed(endpoint: str, name: str) -> None:
    from kiln.aws.clients import ensure_resources, make_clients
    from kiln.catalog.rules import check_draft
    from kiln.catalog.store import CatalogStore

    clients = make_clients(endpoint_url=endpoint, region="us-east-1")
    ensure_resources(clients, table=name, bucket=name)
    CatalogStore(clients.dynamodb, clients.s3, table=name, bucket=name).create(
        check_draft(ECHO), actor="bench"
    )


def template_settings() -> dict[str, str]:
    """The plain-valued KILN_* settings template.yaml gives every function (Globals), as
    deployed: the catalog-version window above all (KILN_CATALOG_MAX_STALENESS_S)."""
    text = (ROOT / "template.yaml").read_text()
    globals_part = text[: text.index("\nResources:")]
    found = re.findall(r'^\s+(KILN_[A-Z_]+): "?([^"!\n/{]+?)"?\s*$', globals_part, re.M)
    return dict(found)


def kiln_code_env(build: str | None) -> dict[str, str]:
    if not build:
        return {"PYTHONPATH": str(ROOT / "functions")}
    out = (ROOT / build).resolve()
    return {"PYTHONPATH": f"{out / 'McpFunction'}:{out / 'DepsLayer' / 'python'}"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--build", default=os.environ.get("KILN_E2E_BUILD"))
    parser.add_argument("--python", default=os.environ.get("KILN_E2E_PYTHON") or sys.executable)
    parser.add_argument(
        "--runner-rounds",
        type=int,
        default=40 if os.geteuid() == 0 else 0,
        help="then a trivial tools/call through the runner function vs in mcp itself, both "
        "under the Lambda profile (bench/lambda_warm/runner.py; needs root; 0: skip)",
    )
    parser.add_argument(
        "--standby",
        default="4",
        help="KILN_RUN_STANDBY for the function (as root here runs get a uid each, so standbys "
        "are made; in Lambda only where the kernel has Landlock): 0 to time every call cold",
    )
    args = parser.parse_args()

    import logging

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        name = f"kiln-bench-{uuid.uuid4().hex[:8]}"
        seed(endpoint, name)
        with tempfile.TemporaryDirectory() as scratch:
            tmp = Path(scratch)
            (tmp / "floor_app.py").write_text(FLOOR_APP)
            kiln_env = {
                **template_settings(),
                **kiln_code_env(args.build),
                "AWS_ACCESS_KEY_ID": "testing",
                "AWS_SECRET_ACCESS_KEY": "testing",
                "AWS_ENDPOINT_URL": endpoint,
                "KILN_TABLE": name,
                "KILN_BUCKET": name,
                "KILN_PUBLIC_ANONYMOUS": "true",
                "KILN_BUNDLE_CACHE_DIR": str(tmp / "bundles"),
                "KILN_RUN_STANDBY": args.standby,
                "POWERTOOLS_SERVICE_NAME": "kiln",
                "POWERTOOLS_METRICS_NAMESPACE": "KilnBench",
            }
            floor_env = {"PYTHONPATH": str(tmp)}
            with (
                runtime(args.python, "kiln.lambda_handlers.mcp", kiln_env, tmp) as kiln,
                runtime(sys.executable, "floor_app.handler", floor_env, tmp) as floor,
            ):
                for _ in range(args.warmup):
                    timed(kiln, LIST)
                    timed(kiln, CALL)
                    timed(floor, LIST)
                lists, calls, floors = [], [], []
                for _ in range(args.rounds):
                    lists.append(timed(kiln, LIST))
                    calls.append(timed(kiln, CALL))
                    floors.append(timed(floor, LIST))
    finally:
        server.stop()
    where = f"sam build {args.build}" if args.build else "source tree"
    load = os.getloadavg()[0]
    print(f"kiln from {where} on {args.python}; {args.rounds} rounds; load {load:.1f}")
    print(f"template settings: {template_settings()}")
    floor_p50 = statistics.median(floors) * 1000
    print(f"{'':34} {'p50 ms':>8} {'p99 ms':>8} {'p50/floor':>10}")
    for label, samples in (
        ("Mangum+FastAPI constant (floor)", floors),
        ("kiln tools/list", lists),
        ("kiln tools/call (trivial Python)", calls),
    ):
        p50 = statistics.median(samples) * 1000
        print(f"{label:34} {p50:8.2f} {pct(samples, 0.99):8.2f} {p50 / floor_p50:9.2f}x")
    if args.runner_rounds:
        call_ratio = statistics.median(calls) * 1000 / floor_p50
        runner_hop(args.runner_rounds, call_ratio)
    return 0


def runner_hop(rounds: int, call_ratio: float) -> None:
    """The same trivial call through the runner function (issue 24) beside in-process, both
    under the Lambda profile (a sandboxed awslambdaric; another harness than the rows above,
    so its ratio to the floor is derived: today's call ratio times runner / in-process)."""
    from bench.lambda_warm.runner import measure

    samples = measure(rounds)
    base = statistics.median(samples["in-process"])
    print(f"\nLambda profile, {rounds} rounds; load {os.getloadavg()[0]:.1f}")
    print(f"{'':34} {'p50 ms':>8} {'p99 ms':>8} {'/in-proc':>10} {'~/floor':>8}")
    for label, key in (("tools/call in mcp (today)", "in-process"),
                       ("tools/call via runner function", "runner")):  # fmt: skip
        values = [v / 1000 for v in samples[key]]
        p50 = statistics.median(values) * 1000
        print(f"{label:34} {p50:8.2f} {pct(values, 0.99):8.2f} {p50 / base:9.2f}x "
              f"{call_ratio * p50 / base:7.2f}x")  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
