"""A TCP proxy between Kiln and its store that can fail the way networks fail.

Modes: "pass" (forward), "cut" (every connection, open or new, is reset), "black hole"
(connections are accepted and nothing comes back, in either direction). `lose_replies(n,
marker)` lets the next n requests that contain `marker` through to the store but throws
their replies away: the write happens, the writer never hears of it (with `cut=True` the
connection is closed the moment the reply comes instead: the writer hears of a failure at once).
"""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress

PASS, CUT, BLACK_HOLE = "pass", "cut", "black hole"


class FaultProxy:
    def __init__(self, upstream_port: int) -> None:
        self.upstream = ("127.0.0.1", upstream_port)
        self.mode = PASS
        self._lost = 0
        self._marker = b""
        self._cut = False
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._stopped = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def set_mode(self, mode: str) -> None:
        self.mode = mode
        if mode == CUT:
            with self._lock:
                for sock in list(self._open):
                    _reset(sock)

    def lose_replies(self, count: int, marker: bytes, *, cut: bool = False) -> None:
        with self._lock:
            self._lost, self._marker, self._cut = count, marker, cut

    @property
    def replies_left_to_lose(self) -> int:
        return self._lost

    def close(self) -> None:
        self._stopped.set()
        self._listener.close()
        with self._lock:
            for sock in list(self._open):
                _reset(sock)

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self.mode == CUT:
                _reset(client)
                continue
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(self.upstream)
        except OSError:
            _reset(client)
            return
        with self._lock:
            self._open |= {client, upstream}
        muted = threading.Event()  # this connection's replies are being thrown away
        threading.Thread(target=self._pump, args=(upstream, client, muted, False)).start()
        self._pump(client, upstream, muted, True)

    def _pump(
        self, src: socket.socket, dst: socket.socket, muted: threading.Event, request: bool
    ) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if self.mode == BLACK_HOLE:
                    continue  # swallowed: the other side hears nothing, ever
                if request and self._marker and self._marker in data:
                    with self._lock:
                        if self._lost > 0:
                            self._lost -= 1
                            muted.set()
                if not request and muted.is_set():
                    if self._cut:  # the reply came: the client's connection ends instead
                        with suppress(OSError):
                            dst.shutdown(socket.SHUT_RDWR)
                        break
                    continue
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                with self._lock:
                    self._open.discard(sock)
                with suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()


def _reset(sock: socket.socket) -> None:
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()
    except OSError:
        pass


@contextmanager
def fault_proxy(upstream_url: str) -> Iterator[FaultProxy]:
    proxy = FaultProxy(int(upstream_url.rsplit(":", 1)[1]))
    try:
        yield proxy
    finally:
        proxy.close()
