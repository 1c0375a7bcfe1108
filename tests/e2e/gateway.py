"""An HTTP API stand-in: real HTTP requests in, HTTP API (payload 2.0) events to a function,
its answers back out, so that a real HTTP client can talk to a Lambda handler.

Each request becomes the captured `tests/events/http-api-server-card.json` with its method,
path, query, headers and body; `invoke` hands the event to the function (an `Environment` of
`lambda_profile.py`, or anything with the same `invoke`) and the answer's status, headers and
body are written back. What it does not do: route keys per route (API Gateway's own routing is
`template.yaml`'s, checked in tests/unit/infra), cookies, payload 1.0.
"""

from __future__ import annotations

import base64
import copy
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from .runtime_api import Answer

TEMPLATE = Path(__file__).resolve().parents[1] / "events" / "http-api-server-card.json"


def event_of(method: str, target: str, headers: dict[str, str], body: bytes) -> dict[str, Any]:
    event: dict[str, Any] = copy.deepcopy(json.loads(TEMPLATE.read_text()))
    path, _, query = target.partition("?")
    event["routeKey"] = event["requestContext"]["routeKey"] = f"ANY {path}"
    event["rawPath"] = event["requestContext"]["http"]["path"] = path
    event["rawQueryString"] = query
    event["requestContext"]["http"]["method"] = method
    event["requestContext"]["requestId"] = uuid.uuid4().hex
    event["requestContext"]["timeEpoch"] = int(time.time() * 1000)
    # As API Gateway: header names in lower case, repeated ones joined with commas.
    event["headers"] = {**headers, "x-forwarded-proto": "http"}
    if body:
        event["body"] = base64.b64encode(body).decode()
        event["isBase64Encoded"] = True
    return event


@contextmanager
def gateway(invoke: Callable[[dict[str, Any]], Answer]) -> Iterator[str]:
    """Serve on a free loopback port until the block ends; yields the base URL."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _forward(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", "0") or 0))
            headers: dict[str, str] = {}
            for name, value in self.headers.items():
                key = name.lower()
                headers[key] = f"{headers[key]},{value}" if key in headers else value
            answer = invoke(event_of(self.command, self.path, headers, body))
            assert answer.kind == "response", answer.payload
            response = answer.payload
            raw = response.get("body") or ""
            data = base64.b64decode(raw) if response.get("isBase64Encoded") else raw.encode()
            self.send_response(response["statusCode"])
            for name, value in (response.get("headers") or {}).items():
                if name.lower() not in ("content-length", "connection"):
                    self.send_header(name, value)
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        do_GET = do_HEAD = do_OPTIONS = do_POST = do_PUT = do_DELETE = _forward

        def log_message(self, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
