"""The AWS resources a test (or a benchmark) works in: the emulator's endpoint, clients, and
a table and bucket of its own (made by the `aws` fixture in conftest.py); and `answer`, how a
test's own stand-in for an AWS endpoint (an http.server handler) sends its answer."""

from __future__ import annotations

import contextlib
import json
import os
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TypeVar

from kiln.aws.clients import AwsClients, ensure_resources, make_clients
from kiln.local.emulator.privacy import write_private


@dataclass(frozen=True)
class AwsStack:
    endpoint_url: str
    clients: AwsClients
    table: str
    bucket: str


def fresh_stack(endpoint: str, prefix: str = "kiln-test") -> AwsStack:
    """A table and a bucket of their own on the emulator at `endpoint`."""
    suffix = uuid.uuid4().hex[:10]
    clients = make_clients(endpoint_url=endpoint, region="us-east-1")
    stack = AwsStack(endpoint, clients, f"{prefix}-{suffix}", f"{prefix}-{suffix}")
    ensure_resources(clients, table=stack.table, bucket=stack.bucket)
    return stack


def key_emulator(state: Path) -> None:
    """Key an emulator's state directory with the tests' fake credentials, so that it takes
    the requests every client and subprocess of the tests signs."""
    key = {
        "access_key_id": os.environ["AWS_ACCESS_KEY_ID"],
        "secret_access_key": os.environ["AWS_SECRET_ACCESS_KEY"],
    }
    write_private(state / "credentials.json", json.dumps(key).encode())


@contextlib.contextmanager
def plain_moto() -> Iterator[str]:
    """A moto server of its own on 127.0.0.1 (its endpoint URL): every service moto has, KMS
    too, which Kiln's emulator does not serve (it serves what `kiln dev` stores)."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        yield f"http://{host}:{port}"
    finally:
        server.stop()


def answer(
    handler: BaseHTTPRequestHandler, status: int, headers: dict[str, str], body: bytes
) -> None:
    """Send one whole answer from a stand-in endpoint's request handler."""
    handler.send_response(status)
    for name, value in {**headers, "Content-Length": str(len(body))}.items():
        handler.send_header(name, value)
    handler.end_headers()
    handler.wfile.write(body)


Served = TypeVar("Served", bound=ThreadingHTTPServer)


@contextlib.contextmanager
def serving(server: Served) -> Iterator[Served]:
    """A stand-in endpoint served from a thread while the block runs, then stopped."""
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
