"""Cold start: a fresh process importing Kiln's Lambda handler and answering its first
`tools/list`, beside the official MCP Python SDK's stateless app doing the same, in one run.

Both sides get the same HTTP API v2 event through the same adapter (Mangum 0.22) in-process,
so the difference is what each imports and builds before it can answer. Kiln's catalog is on
a moto server (over HTTP) seeded with the same three tools the SDK app lists.

usage: python -m bench.coldstart.run [--rounds 7] [--sdk-python PY] [--build DIR --python PY313]
                                    [--importtime] [--call]
The SDK side runs on --sdk-python (or SDK_PYTHON), else in the SDK's own venv, which
`bench.protocol.sdk` makes on first use (kept out of Kiln's venv). With --build, Kiln runs
from a `sam build` output (McpFunction + DepsLayer, as Lambda lays them out, with the .pyc
files the build compiled) on --python, a Python 3.13 like the Lambda runtime's; give the SDK
side a 3.13 too, so that both run on the same interpreter.
Prints the median wall time from spawning each process to its answer, and the ratio
(goal: Kiln at most 0.5x the SDK). `--importtime` also prints Kiln's heaviest imports.
`--call` also times a fresh process whose first request is a `tools/call` (`echo`, run in that
process as `kiln dev` runs it: no runner function here), Kiln only (the SDK app has no tool to
run): what the list's cold start defers to the first call shows there.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from bench.protocol import sdk

ROOT = Path(__file__).resolve().parents[2]
EVENT = ROOT / "tests" / "events" / "http-api-tools-list.json"

TOOLS = [
    {
        "name": "add_vat",
        "description": "Add VAT to a net amount.",
        "language": "python",
        "code": "import json,sys\nprint(json.dumps(json.load(sys.stdin)))\n",
        "input_schema": {
            "type": "object",
            "properties": {"net": {"type": "number"}, "rate": {"type": "number"}},
            "required": ["net"],
        },
    },
    {
        "name": "echo",
        "description": "Echo the given text back.",
        "language": "python",
        "code": "import json,sys\nprint(json.load(sys.stdin)['text'])\n",
        "input_schema": {
            "type": "object",
            "properties": {"text": {"type": "string"}},
            "required": ["text"],
        },
    },
    {
        "name": "fail",
        "description": "Always fails (isError=true).",
        "language": "python",
        "code": "import sys\nsys.exit(1)\n",
        "input_schema": {"type": "object", "properties": {"message": {"type": "string"}}},
    },
]

# What each fresh process runs: import, build, answer one event, print the status line.
KILN_CHILD = """
import json, sys, time
event = json.loads(sys.stdin.read())
started = time.perf_counter()
from kiln.lambda_handlers import mcp  # Lambda's init phase (what SnapStart snapshots)
initialised = time.perf_counter()
response = mcp(event, Context())
answered = time.perf_counter()
body = json.loads(response["body"])
print(response["statusCode"], len(body["result"]["tools"]), flush=True)
print("split", initialised - started, answered - initialised, flush=True)
print("cpu", time.process_time(), flush=True)
"""

# The same, with a tools/call as the first request: import, build, run `echo`, answer.
KILN_CALL_CHILD = """
import json, sys, time
event = json.loads(sys.stdin.read())
event["body"] = json.dumps({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                            "params": {"name": "echo", "arguments": {"text": "cold"}}})
started = time.perf_counter()
from kiln.lambda_handlers import mcp
initialised = time.perf_counter()
response = mcp(event, Context())
answered = time.perf_counter()
body = json.loads(response["body"])
said = body["result"]["content"][0]["text"].strip()
print(response["statusCode"], 3 if said == "cold" else said, flush=True)
print("split", initialised - started, answered - initialised, flush=True)
print("cpu", time.process_time(), flush=True)
"""

SDK_CHILD = """
import json, sys
event = json.loads(sys.stdin.read())
from mangum import Mangum
import mcp.types as t
from mcp.server import Server

def obj(props, req):
    return {"type": "object", "properties": props, "required": req}

TOOLS = [
    t.Tool(name="add_vat", description="Add VAT to a net amount.",
           input_schema=obj({"net": {"type": "number"}, "rate": {"type": "number"}}, ["net"])),
    t.Tool(name="echo", description="Echo the given text back.",
           input_schema=obj({"text": {"type": "string"}}, ["text"])),
    t.Tool(name="fail", description="Always fails (isError=true).",
           input_schema=obj({"message": {"type": "string"}}, [])),
]

async def list_tools(ctx, params):
    return t.ListToolsResult(tools=TOOLS)

async def call_tool(ctx, params):
    raise NotImplementedError

server = Server("ref-tools-only", version="0.0.1", on_list_tools=list_tools, on_call_tool=call_tool)
app = server.streamable_http_app(stateless_http=True, json_response=True)
response = Mangum(app, lifespan="auto")(event, Context())
body = json.loads(response["body"])
print(response["statusCode"], len(body["result"]["tools"]), flush=True)
print("cpu", time.process_time(), flush=True)
"""

CONTEXT = """
import time
class Context:
    aws_request_id = "bench"
    function_name = "kiln-bench"
    memory_limit_in_mb = 1024
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:kiln-bench"
    def __init__(self):
        self._deadline = time.time() + 30
    def get_remaining_time_in_millis(self):
        return int((self._deadline - time.time()) * 1000)
"""


def event() -> str:
    data = json.loads(EVENT.read_text())
    data["requestContext"]["timeEpoch"] = int(time.time() * 1000)
    # The SDK app checks Host against DNS-rebinding rules; neither side needs the API's host.
    data["headers"]["host"] = "127.0.0.1:8000"
    return json.dumps(data)


def timed(argv: list[str], env: dict[str, str], stdin: str) -> tuple[float, list[float], float]:
    """Wall time from spawning the process to its answer, the child's own `split` line, and
    its CPU time (user + system) at the answer.

    The clock stops at the answer, not at the process's exit: a Lambda runtime never exits
    between invocations, and tearing down a large heap at exit can take a second here. CPU
    time is what a loaded machine stretches least: the wall ratio moves with the load.
    """
    started = time.perf_counter()
    child = subprocess.Popen(
        argv,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stdin is not None
    assert child.stdout is not None
    child.stdin.write(stdin)
    child.stdin.close()
    answered = None
    lines = []
    for line in child.stdout:  # Kiln's JSON log lines come first
        lines.append(line.strip())
        if line.strip() == "200 3" and answered is None:
            answered = time.perf_counter() - started
    stderr = child.stderr.read() if child.stderr else ""
    if child.wait(timeout=60) != 0 or answered is None:
        raise SystemExit(f"{argv[0]} failed:\n" + "\n".join(lines) + f"\n{stderr[-3000:]}")
    split = [float(x) for line in lines if line.startswith("split ") for x in line.split()[1:]]
    cpu = next(float(line.split()[1]) for line in lines if line.startswith("cpu "))
    return answered, split, cpu


def seed(endpoint: str, table: str, bucket: str) -> None:
    from kiln.aws.clients import ensure_resources, make_clients
    from kiln.catalog.rules import check_draft
    from kiln.catalog.store import CatalogStore

    clients = make_clients(endpoint_url=endpoint, region="us-east-1")
    ensure_resources(clients, table=table, bucket=bucket)
    store = CatalogStore(clients.dynamodb, clients.s3, table=table, bucket=bucket)
    for tool in TOOLS:
        store.create(check_draft(tool), actor="bench")


def heaviest_imports(
    python: str, env: dict[str, str], stdin: str, top: int
) -> list[tuple[int, str]]:
    code = CONTEXT + KILN_CHILD
    done = subprocess.run(
        [python, "-X", "importtime", "-c", code],
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    # Self time summed per top-level package: who the time goes to, wherever it is imported.
    totals: dict[str, int] = {}
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        own, _, name = line.removeprefix("import time:").split("|")
        package = name.strip().split(".")[0]
        totals[package] = totals.get(package, 0) + int(own)
    return sorted(((micros, name) for name, micros in totals.items()), reverse=True)[:top]


def first_call(python: str, env: dict[str, str], rounds: int) -> None:
    argv = [python, "-c", CONTEXT + KILN_CALL_CHILD]
    timed(argv, env, event())  # warm-up
    walls, calls, cpus = [], [], []
    for _ in range(rounds):
        wall, (_, call_s), cpu = timed(argv, env, event())
        walls.append(wall)
        calls.append(call_s)
        cpus.append(cpu)
    print(
        f"kiln, fresh process to first tools/call (echo, run in-process):"
        f" {statistics.median(walls) * 1000:.1f} ms wall, CPU {statistics.median(cpus) * 1000:.1f}"
        f" ms, of which the call itself {statistics.median(calls) * 1000:.1f} ms"
    )


def code_path(build: str | None) -> str:
    if not build:
        return str(ROOT / "functions")
    out = (ROOT / build).resolve()
    return f"{out / 'McpFunction'}:{out / 'DepsLayer' / 'python'}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument(
        "--sdk-python",
        default=os.environ.get("SDK_PYTHON"),
        help="a Python with the SDK's pins (bench.protocol.sdk.PINS); default: the SDK's venv",
    )
    parser.add_argument("--build", help="a `sam build` output folder to run Kiln from")
    parser.add_argument("--python", default=sys.executable, help="Kiln's interpreter")
    parser.add_argument("--importtime", action="store_true")
    parser.add_argument("--call", action="store_true", help="also time a cold first tools/call")
    args = parser.parse_args()
    args.sdk_python = args.sdk_python or str(sdk.python())

    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    import logging

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        name = f"kiln-bench-{uuid.uuid4().hex[:8]}"
        seed(endpoint, name, name)
        with tempfile.TemporaryDirectory() as scratch:
            base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": scratch}
            kiln_env = {
                **base,
                "PYTHONPATH": code_path(args.build),
                "AWS_REGION": "us-east-1",
                "AWS_ACCESS_KEY_ID": "testing",
                "AWS_SECRET_ACCESS_KEY": "testing",
                "AWS_ENDPOINT_URL": endpoint,
                "AWS_LAMBDA_FUNCTION_NAME": "kiln-bench",
                "KILN_TABLE": name,
                "KILN_BUCKET": name,
                "POWERTOOLS_METRICS_NAMESPACE": "KilnBench",
                "POWERTOOLS_SERVICE_NAME": "kiln",
                # As template.yaml sets them for every function (else a start asks Node).
                "KILN_BUNDLE_TARGET": "lambda-python3.13-x86_64",
                "KILN_NODE_BUNDLE_TARGET": "node24-x86_64",
                "KILN_WORKER_FUNCTION": "kiln-bench-worker",  # tasks start in a worker
            }
            kiln_argv = [args.python, "-c", CONTEXT + KILN_CHILD]
            sdk_argv = [args.sdk_python, "-c", CONTEXT + SDK_CHILD]
            # One warm-up each (disk cache, .pyc files), then alternate so drift hits both.
            timed(kiln_argv, kiln_env, event())
            timed(sdk_argv, base, event())
            kiln_times, sdk_times, inits, firsts, kiln_cpu, sdk_cpu = [], [], [], [], [], []
            for _ in range(args.rounds):
                kiln_s, (init_s, first_s), cpu_s = timed(kiln_argv, kiln_env, event())
                kiln_times.append(kiln_s)
                inits.append(init_s)
                firsts.append(first_s)
                kiln_cpu.append(cpu_s)
                sdk_s, _, cpu_s = timed(sdk_argv, base, event())
                sdk_times.append(sdk_s)
                sdk_cpu.append(cpu_s)
            kiln_s, sdk_s = statistics.median(kiln_times), statistics.median(sdk_times)
            where = f"sam build output {args.build}" if args.build else "the source tree"
            print(f"kiln from {where} on {args.python}, SDK on {args.sdk_python}")
            print(f"{args.rounds} rounds, median wall time, load {os.getloadavg()[0]:.1f}")
            print(f"kiln handler, fresh process to first tools/list: {kiln_s * 1000:7.1f} ms")
            print(f"official SDK stateless app, same:                {sdk_s * 1000:7.1f} ms")
            print(f"ratio kiln/sdk: {kiln_s / sdk_s:.2f}x (goal <= 0.50x)")
            kiln_c, sdk_c = statistics.median(kiln_cpu), statistics.median(sdk_cpu)
            print(
                f"CPU (user+sys) to the answer: kiln {kiln_c * 1000:.1f} ms,"
                f" SDK {sdk_c * 1000:.1f} ms, ratio {kiln_c / sdk_c:.2f}x"
            )
            init_ms, first_ms = statistics.median(inits) * 1000, statistics.median(firsts) * 1000
            print(
                f"kiln inside its process: init (import + build) {init_ms:.1f} ms,"
                f" first tools/list {first_ms:.1f} ms (SnapStart restores the init from a snapshot)"
            )
            if args.call:
                first_call(args.python, kiln_env, args.rounds)
            if args.importtime:
                print("kiln's heaviest imports (-X importtime self ms, per top-level package):")
                for micros, module in heaviest_imports(args.python, kiln_env, event(), 10):
                    print(f"  {micros / 1000:7.1f}  {module}")
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
