"""Where a hostile run posts what it took (`DropBox`): a listener of the test's on 127.0.0.1.

`POST <url>` keeps a JSON body (`posted`, in order; `arrived` is set on each); `GET
<url>/release` answers once the test calls `release()` (or after 20 s): a run waits there
while another runs beside it.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class DropBox:
    posted: list[dict[str, Any]] = field(default_factory=list)
    arrived: threading.Condition = field(default_factory=threading.Condition)
    released: threading.Event = field(default_factory=threading.Event)
    server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}/drop"

    @property
    def port(self) -> int:
        assert self.server is not None
        return int(self.server.server_address[1])

    @contextlib.contextmanager
    def serve(self) -> Iterator[DropBox]:
        box = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return None

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                with box.arrived:
                    box.posted.append(json.loads(body))
                    box.arrived.notify_all()
                self.send_response(204)
                self.end_headers()

            def do_GET(self) -> None:
                released = box.released.wait(20)
                self.send_response(200 if released else 504)
                self.send_header("content-length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        try:
            yield self
        finally:
            self.released.set()
            self.server.shutdown()
            self.server.server_close()

    def release(self) -> None:
        self.released.set()

    def wait_for(self, key: str, *, since: int = 0, timeout_s: float = 60.0) -> dict[str, Any]:
        """The first body posted after `since` bodies that has `key`; AssertionError if none
        arrives in time."""
        deadline = time.monotonic() + timeout_s
        with self.arrived:
            while True:
                for body in self.posted[since:]:
                    if key in body:
                        return body
                left = deadline - time.monotonic()
                assert left > 0, f"nothing with {key!r} was posted in {timeout_s:.0f} s"
                self.arrived.wait(left)

    def stolen(self) -> list[Any]:
        return [p["stolen"] for p in self.posted if "stolen" in p]
