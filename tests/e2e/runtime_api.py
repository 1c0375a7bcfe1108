"""A local stand-in for the AWS Lambda Runtime API, for driving a real runtime client.

The runtime interface client (`python -m awslambdaric module.handler`) long-polls
`GET /2018-06-01/runtime/invocation/next`, runs the handler and posts the result to
`.../invocation/{id}/response` or `.../invocation/{id}/error`; a failed init is posted to
`.../init/error`. Under SnapStart it also asks `GET .../restore/next` once after init.
`RuntimeApi.invoke` queues one event with a deadline and waits for the answer, as the Lambda
service does. Only the parts of the API a runtime client uses are here. `stolen` hands the
next invocation to the test instead, as a process of the environment that wins the race for
`/next` takes it (its answer is then posted over HTTP, as any process there can).
"""

from __future__ import annotations

import contextlib
import json
import queue
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

PREFIX = "/2018-06-01/runtime"
FUNCTION_ARN = "arn:aws:lambda:us-east-1:123456789012:function:kiln-e2e"
TRACE_ID = "Root=1-00000000-000000000000000000000000;Sampled=0"


@dataclass(frozen=True)
class Answer:
    kind: str  # "response" or "error"
    payload: Any
    request_id: str
    deadline_ms: int
    answered_ms: int  # wall clock, ms since the epoch, when the runtime posted the answer


@dataclass
class _Pending:
    request_id: str
    body: bytes
    deadline_ms: int
    tenant_id: str | None = None
    answered: threading.Event = field(default_factory=threading.Event)
    answer: Answer | None = None


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A runtime killed while it long-polls /next resets its connection: not an error here.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


def _gone(connection: Any) -> bool:
    """True when the client closed its side (end of file waiting to be read)."""
    import select
    import socket

    try:
        readable, _, _ = select.select([connection], [], [], 0)
        return bool(readable) and connection.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


class RuntimeApiError(AssertionError):
    """The runtime did not answer as Lambda expects (init failed, crashed, or ran out of time)."""


class RuntimeApi:
    """Serve the Runtime API on 127.0.0.1; `address` goes into AWS_LAMBDA_RUNTIME_API."""

    def __init__(self) -> None:
        self._next: queue.Queue[_Pending] = queue.Queue()
        self._by_id: dict[str, _Pending] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self.init_errors: list[Any] = []
        self.restored = threading.Event()
        self.polled = threading.Event()  # set on the first /next: init is complete
        self._thief: queue.Queue[tuple[str, Any]] | None = None
        self.asking = 0  # /next requests waiting for an invocation now
        self._server = _Server(("127.0.0.1", 0), self._handler_class())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def address(self) -> str:
        host, port = self._server.server_address[:2]
        return f"{host}:{port}"

    def __enter__(self) -> RuntimeApi:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopping.set()
        self._server.shutdown()
        self._server.server_close()

    def wait_ready(self, timeout_s: float, alive: Callable[[], bool] = lambda: True) -> None:
        """Wait until the runtime finished init and asks for work."""
        deadline = time.monotonic() + timeout_s
        while not self.polled.wait(0.02):
            if self.init_errors:
                raise RuntimeApiError(f"init failed: {self.init_errors[0]}")
            if not alive():
                raise RuntimeApiError("the runtime exited during init")
            if time.monotonic() > deadline:
                raise RuntimeApiError(f"the runtime did not finish init within {timeout_s} s")

    def wait_asked(self, timeout_s: float, alive: Callable[[], bool]) -> bool:
        """Wait until someone asks for work (True) or the runtime has exited (False)."""
        deadline = time.monotonic() + timeout_s
        while alive():
            if self.asking or time.monotonic() > deadline:
                return True
            time.sleep(0.005)
        return False

    def invoke(
        self,
        event: Any,
        *,
        timeout_s: float = 30.0,
        grace_s: float = 5.0,
        alive: Callable[[], bool] = lambda: True,
        tenant_id: str | None = None,
    ) -> Answer:
        """Hand `event` to the runtime with `timeout_s` left, and wait for its answer."""
        request_id = str(uuid.uuid4())
        deadline_ms = int((time.time() + timeout_s) * 1000)
        pending = _Pending(request_id, json.dumps(event).encode(), deadline_ms, tenant_id)
        with self._lock:
            self._by_id[request_id] = pending
            thief, self._thief = self._thief, None
        if thief is not None:
            thief.put((request_id, event))
        else:
            self._next.put(pending)
        give_up = time.monotonic() + timeout_s + grace_s
        while not pending.answered.wait(0.02):
            if not alive():
                raise RuntimeApiError(f"the runtime exited during invocation {request_id}")
            if time.monotonic() > give_up:
                raise RuntimeApiError(f"no answer to {request_id} within {timeout_s + grace_s} s")
        assert pending.answer is not None
        return pending.answer

    @contextlib.contextmanager
    def stolen(self) -> Iterator[queue.Queue[tuple[str, Any]]]:
        """The next invocation (request id, event) goes to the queue yielded, never to the
        runtime: what a process left in the environment gets when it wins the race for `/next`
        (deterministic here, where two pollers would race). Its answer is whatever is then
        POSTed to `.../invocation/{id}/response`."""
        taken: queue.Queue[tuple[str, Any]] = queue.Queue()
        with self._lock:
            self._thief = taken
        try:
            yield taken
        finally:
            with self._lock:
                self._thief = None

    # ------------------------------------------------------------------ HTTP side

    def _take_next(self, connection: Any) -> _Pending | None:
        with self._lock:
            self.asking += 1
        try:
            return self._wait_for_work(connection)
        finally:
            with self._lock:
                self.asking -= 1

    def _wait_for_work(self, connection: Any) -> _Pending | None:
        while not self._stopping.is_set():
            if _gone(connection):  # a poller that was killed: its event goes to the next one
                return None
            try:
                pending = self._next.get(timeout=0.1)
            except queue.Empty:
                continue
            if _gone(connection):
                self._next.put(pending)
                return None
            return pending
        return None

    def _answer(self, request_id: str, kind: str, body: bytes) -> bool:
        with self._lock:
            pending = self._by_id.pop(request_id, None)
        if pending is None:
            return False
        try:
            payload = json.loads(body) if body else None
        except ValueError:
            payload = body.decode("utf-8", "replace")
        pending.answer = Answer(
            kind, payload, request_id, pending.deadline_ms, int(time.time() * 1000)
        )
        pending.answered.set()
        return True

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body are two writes: with Nagle's algorithm the body waits for the
            # peer's delayed ACK (~40 ms on a kept-alive connection), which Lambda's own
            # services (Go, TCP_NODELAY by default) never add.
            disable_nagle_algorithm = True

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _reply(
                self, status: int, body: bytes = b"", headers: dict[str, str] | None = None
            ) -> None:
                try:
                    self.send_response(status)
                    for name, value in (headers or {}).items():
                        self.send_header(name, value)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except ConnectionError:
                    pass  # the runtime was stopped while it waited for work

            def _body(self) -> bytes:
                length = int(self.headers.get("Content-Length") or 0)
                return self.rfile.read(length) if length else b""

            def do_GET(self) -> None:
                if self.path == f"{PREFIX}/invocation/next":
                    api.polled.set()
                    pending = api._take_next(self.connection)
                    if pending is None:
                        self._reply(503)
                        return
                    self._reply(
                        200,
                        pending.body,
                        {
                            "Content-Type": "application/json",
                            "Lambda-Runtime-Aws-Request-Id": pending.request_id,
                            "Lambda-Runtime-Deadline-Ms": str(pending.deadline_ms),
                            "Lambda-Runtime-Invoked-Function-Arn": FUNCTION_ARN,
                            "Lambda-Runtime-Trace-Id": TRACE_ID,
                            **(
                                {"Lambda-Runtime-Aws-Tenant-Id": pending.tenant_id}
                                if pending.tenant_id
                                else {}
                            ),
                        },
                    )
                elif self.path == f"{PREFIX}/restore/next":
                    api.restored.set()
                    self._reply(200)
                else:
                    self._reply(404)

            def do_POST(self) -> None:
                body = self._body()
                parts = self.path.removeprefix(f"{PREFIX}/").split("/")
                if parts == ["init", "error"] or parts == ["restore", "error"]:
                    api.init_errors.append(json.loads(body) if body else None)
                    self._reply(202, b'{"status":"OK"}')
                elif (
                    len(parts) == 3
                    and parts[0] == "invocation"
                    and parts[2] in {"response", "error"}
                ):
                    found = api._answer(parts[1], parts[2], body)
                    self._reply(202 if found else 400, b'{"status":"OK"}' if found else b"{}")
                else:
                    self._reply(404)

        return Handler
