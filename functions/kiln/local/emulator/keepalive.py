"""werkzeug's request handler with HTTP/1.1 keep-alive, which werkzeug's own turns off.

werkzeug's development server answers every request with `Connection: close` (and then
waits 10 ms for stray input before it closes the socket), so every call Kiln made to the
emulator opened a TCP connection and the emulator started a thread for it: under load, more
of kiln dev's time went into connecting than into the calls. The emulator's answers are
always whole bodies (DurableEmulator reads a request's body by its length and answers with
one bytes object), so here an answer is sent with its Content-Length and the connection
stays open for the client's next request, as HTTP/1.1 has it, unless the client asks to
close it or the request's body came chunked (then its end was the app's to find).
The environ is werkzeug's own (`make_environ`), as before.
"""

from __future__ import annotations

import logging
import socket
from typing import Any

from werkzeug.serving import WSGIRequestHandler

from kiln.local.emulator.durable import Response, call

log = logging.getLogger("kiln.local.emulator")
IDLE_TIMEOUT_S = 300.0  # a connection idle this long is closed (its thread ends)
_OWN = frozenset({"content-length", "connection", "transfer-encoding"})


class KeepAliveHandler(WSGIRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = IDLE_TIMEOUT_S

    def setup(self) -> None:
        super().setup()
        # An answer goes out as headers, then body: on a connection that stays open, Nagle's
        # algorithm would hold the body back until the client's delayed ACK (~40 ms).
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_request(self, *_: Any) -> None:
        pass

    def run_wsgi(self) -> None:
        if self.headers.get("Expect", "").lower().strip(" \t") == "100-continue":
            self.wfile.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        environ = self.make_environ()
        if environ.get("wsgi.input_terminated"):  # chunked: what the app left unread is lost
            self.close_connection = True
        try:
            answer = call(self.server.app, environ)
        except Exception:
            log.exception("the emulator failed on %s %s", self.command, self.path)
            self.close_connection = True
            answer = Response("500 Internal Server Error", [], b"")
        self._answer(answer.status, answer.headers, answer.body)

    def _answer(self, status: str, headers: list[tuple[str, str]], body: bytes) -> None:
        code, _, reason = status.partition(" ")
        self.send_response(int(code), reason)
        head = self.command == "HEAD"  # its Content-Length is the object's, not this body's
        for name, value in headers:
            if name.lower() not in _OWN or (head and name.lower() == "content-length"):
                self.send_header(name, value)
        if not head:
            self.send_header("Content-Length", str(len(body)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if not head:
            self.wfile.write(body)
        self.wfile.flush()
