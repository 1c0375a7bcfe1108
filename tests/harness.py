"""Test harness: a real Kiln app served by uvicorn on a loopback port."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import uvicorn

from conftest import AwsStack
from kiln.api.public import create_public_app
from kiln.app import create_app
from kiln.settings import Settings
from kiln.stack import Kiln, build_kiln, prepare_process

AUTHOR_KEY = "test-author-key-0123456789"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class RunningKiln:
    url: str
    parts: Kiln
    http: httpx.Client

    def api(
        self, method: str, path: str, *, key: str | None = AUTHOR_KEY, **kw: Any
    ) -> httpx.Response:
        headers = dict(kw.pop("headers", {}) or {})
        if key is not None:
            headers["Authorization"] = f"Bearer {key}"
        return self.http.request(method, self.url + path, headers=headers, **kw)

    def mcp(
        self, body: Any, *, headers: dict[str, str] | None = None, path: str = "/mcp"
    ) -> httpx.Response:
        base = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        return self.http.post(self.url + path, json=body, headers={**base, **(headers or {})})


def serve(settings: Settings, aws: AwsStack, *, public_only: bool = False) -> Iterator[RunningKiln]:
    """The full app (kiln dev's), or with `public_only` the public Lambda function's."""
    prepare_process()  # what every entry point does: redacted logs, a non-dumpable server
    parts = build_kiln(settings, clients=aws.clients)
    app = create_public_app(parts) if public_only else create_app(parts)
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.01)
    try:
        with httpx.Client(timeout=60) as http:
            yield RunningKiln(f"http://127.0.0.1:{port}", parts, http)
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        parts.close_runner()  # its warm-ups and standbys too
