"""What the call ledger and a quota add to `tools/call`: off vs on, interleaved, same run.

Run: python -m bench.ledger.run [--rounds N]

One moto server and three Kiln servers (uvicorn), each in a process of its own as in AWS
(DynamoDB is remote; each Lambda container is a process), identical but for the gate:

- off: no ledger, and the key has no quota;
- on: every call admitted against a calls-per-minute quota on its key (far from the limit,
  from a claim of up to 32 calls made with one conditional update, overlapped with the
  catalog version read) and recorded in the ledger (one put, started once the answer is out);
- on, Lambda: the same, but answered only after the ledger write, as Mangum does in Lambda
  (the write is a background task of the response, which Lambda waits for: an answered call
  is always recorded).

Each round calls a trivial Python tool once on each, in a rotating order; prints the medians,
their ratios to "off", and each server's CPU time per call (the emulator's is shared).
Goal: "on" at most 1.10x.

The emulator is moto's app on an HTTP/1.1 server, so botocore keeps its connections open as
it does with DynamoDB (`python -m moto.server` closes every connection: each request then
pays a new TCP connection on both sides; `--connection-per-request` measures that way).
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from kiln.access.quotas import Quota
from kiln.api.apps import create_app
from kiln.aws.clients import ensure_resources, make_clients
from kiln.catalog.rules import check_draft
from kiln.catalog.store import CatalogStore
from kiln.identity.keys import KeyStore
from kiln.settings import Settings
from kiln.stack import build_kiln, prepare_process

HEADERS = {
    "Content-Type": "application/json",
    "Accept": "application/json, text/event-stream",
    "mcp-protocol-version": "2025-11-25",
}
BODY = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "tools/call",
    "params": {"name": "hello", "arguments": {"who": "bench"}},
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class LambdaScope:
    """Serves requests as Mangum does in Lambda: marked with `aws.context`, and the answer
    released only when the app has returned (background work included). Without a clock,
    time left falls back to the budget."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        held: list[Any] = []

        async def hold(message: Any) -> None:
            held.append(message)

        await self.app({**scope, "aws.context": object()}, receive, hold)
        for message in held:
            await send(message)


def wait_for(url: str) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.TransportError:
            if time.monotonic() > deadline:
                raise SystemExit(f"{url} did not start") from None
            time.sleep(0.05)


def serve_here(args: argparse.Namespace) -> None:
    """The child side: one Kiln app on uvicorn, until the parent stops it."""

    prepare_process()
    settings = Settings(
        table="kiln-bench", bucket="kiln-bench", endpoint_url=args.endpoint, region="us-east-1",
        public_anonymous=False, bundle_cache_dir=Path(args.cache), ledger=args.mode != "off",
        ledger_digest_key="bench-digest-key",
    )  # fmt: skip
    app: Any = create_app(build_kiln(settings))
    if args.mode == "lambda":
        app = LambdaScope(app)
    config = uvicorn.Config(app, host="127.0.0.1", port=args.port, log_level="warning",
                            lifespan="off")  # fmt: skip
    uvicorn.Server(config).run()


def serve_moto(port: int) -> None:
    """The child side: moto's app, keeping connections open (HTTP/1.1), until stopped."""
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
    from werkzeug.serving import WSGIRequestHandler, make_server

    class KeepAlive(WSGIRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_request(self, *_: Any) -> None:
            pass

    app = DomainDispatcherApplication(create_backend_app)
    make_server("127.0.0.1", port, app, threaded=True, request_handler=KeepAlive).serve_forever()


def start_moto(port: int, *, keep_alive: bool) -> subprocess.Popen[bytes]:
    """The emulator in a process of its own, as DynamoDB is: its work must not be counted as
    the server's (one process would share one GIL between them)."""
    if keep_alive:
        command = [sys.executable, __file__, "--serve-moto", "--port", str(port)]
    else:
        command = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def serve(mode: str, endpoint: str, cache: str) -> tuple[str, subprocess.Popen[bytes]]:
    """A Kiln server in a process of its own (as each Lambda container is)."""
    port = free_port()
    child = subprocess.Popen(
        [sys.executable, __file__, "--serve", mode, "--port", str(port), "--endpoint", endpoint,
         "--cache", cache],
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "functions")},
    )  # fmt: skip
    wait_for(f"http://127.0.0.1:{port}/api/health")
    return f"http://127.0.0.1:{port}/mcp", child


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--serve", choices=["off", "on", "lambda"], help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--endpoint", help=argparse.SUPPRESS)
    parser.add_argument("--cache", help=argparse.SUPPRESS)
    parser.add_argument("--serve-moto", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--connection-per-request",
        action="store_true",
        help="run `python -m moto.server`, which closes every connection",
    )
    args = parser.parse_args()
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        os.environ.setdefault(name, "bench")
    if args.serve_moto:
        serve_moto(args.port)
        return
    if args.serve:
        args.mode = args.serve
        serve_here(args)
        return
    rounds = args.rounds
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    moto_port = free_port()
    moto = start_moto(moto_port, keep_alive=not args.connection_per_request)
    endpoint = f"http://127.0.0.1:{moto_port}"
    wait_for(endpoint)
    clients = make_clients(endpoint_url=endpoint, region="us-east-1")
    ensure_resources(clients, table="kiln-bench", bucket="kiln-bench")
    store = CatalogStore(clients.dynamodb, clients.s3, table="kiln-bench", bucket="kiln-bench")
    code = "import json, sys\nprint('hello ' + json.load(sys.stdin)['who'])\n"
    schema = {"type": "object", "properties": {"who": {"type": "string"}}}
    store.create(check_draft({"name": "hello", "description": "Greets.", "code": code,
                              "language": "python", "input_schema": schema}))  # fmt: skip
    keys = KeyStore(clients.dynamodb, table="kiln-bench")
    _, plain = keys.create("plain", "call")
    _, metered = keys.create("metered", "call", quota=Quota(calls_per_minute=1_000_000))
    with tempfile.TemporaryDirectory() as cache:
        modes = {"off": "off", "on": "on", "on, Lambda": "lambda"}
        servers = {name: serve(mode, endpoint, cache) for name, mode in modes.items()}
        targets = {
            name: (url, plain if name == "off" else metered) for name, (url, _) in servers.items()
        }
        times: dict[str, list[float]] = {name: [] for name in targets}
        try:
            with httpx.Client(timeout=60) as http:

                def call(name: str) -> float:
                    url, key = targets[name]
                    headers = {**HEADERS, "Authorization": f"Bearer {key}"}
                    start = time.perf_counter()
                    answer = http.post(url, json=BODY, headers=headers)
                    elapsed = time.perf_counter() - start
                    assert answer.status_code == 200, answer.text
                    assert answer.json()["result"]["isError"] is False, answer.text
                    return elapsed

                for name in targets:  # warm: key lookups, code fetch, first window
                    for _ in range(5):
                        call(name)
                names = list(targets)
                cpu = {name: cpu_seconds(servers[name][1].pid) for name in names}
                for index in range(rounds):
                    for name in names[index % 3 :] + names[: index % 3]:
                        times[name].append(call(name))
                for name in names:
                    cpu[name] = cpu_seconds(servers[name][1].pid) - cpu[name]
        finally:
            for _, child in servers.values():
                child.terminate()
                child.wait(timeout=20)
            moto.terminate()
            moto.wait(timeout=10)
    base_ms = statistics.median(times["off"]) * 1000
    how = "a connection per request" if args.connection_per_request else "kept-alive connections"
    print(f"tools/call of a Python tool over HTTP, {rounds} interleaved rounds; emulator: {how}")
    for name, samples in times.items():
        median = statistics.median(samples) * 1000
        per_call = cpu[name] / rounds * 1000
        print(
            f"  ledger and quota {name:11} median {median:7.2f} ms  ratio {median / base_ms:5.3f}x"
            f"  server CPU {per_call:5.2f} ms/call"
        )
    print("  goal: 'on' at most 1.10x")


if __name__ == "__main__":
    main()
