"""Connection hardening for `kiln dev`'s uvicorn: timeouts, a connection cap, quiet logs.

uvicorn's h11 protocol waits forever for a request that never finishes arriving (its
keep-alive timer starts only after a response, and any byte stops it), accepts connections
until the process runs out of file descriptors, and logs every accept error and bad request.
Thousands of idle connections then stop `/mcp` from answering and fill the disk with logs.

`hardened_protocol` returns an h11 protocol class that
- closes a connection whose request is not complete `request_timeout_s` after its first byte
  (or `idle_timeout_s` after it opened, when nothing came): the header and body timeout;
- keeps at most `max_connections` open (never more than the file descriptor limit leaves
  room for): a new one past the cap evicts the longest-idle connection of its own client
  address, else the longest-idle of any, or is closed when every connection is busy. The idle
  connections are kept oldest first (`IdleConnections`), so an eviction costs the same with
  10 or 10,000 open: a flood of connections that never send a request is shed as fast as it
  is accepted, and a request among them (a ping) is read and answered. A connection whose
  request has arrived but not been read yet (the loop still busy accepting the flood) is
  passed over: closing it would reset a ping that had done nothing wrong;
- answers an unparseable request with a JSON-RPC error body instead of plain text.
`limit_log_rate` keeps repeated log lines (accept errors such as EMFILE, bad requests) to a
few per interval, with a count of what was left out.
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import resource
import socket
import struct
import termios
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from kiln.protocol.errors import jsonrpc_error
from kiln.protocol.jsontext import dumps
from kiln.protocol.spec import INVALID_REQUEST

log = logging.getLogger(__name__)

_FD_RESERVE = 64  # descriptors kept for the store, tool runs' pipes, bundles and logs
PASS_OVER_AT_MOST = 16  # connections with a request waiting skipped per eviction (bounded)


@dataclass(frozen=True)
class ConnectionLimits:
    idle_timeout_s: float = 5.0  # a connection with no request in progress
    request_timeout_s: float = 10.0  # first byte of a request to its last (headers and body)
    max_connections: int = 1000
    max_header_bytes: int = 16 * 1024


def connection_cap(limits: ConnectionLimits) -> int:
    """`max_connections`, lowered to leave a reserve of file descriptors below the soft limit."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return limits.max_connections
    reserve = max(_FD_RESERVE, soft // 4)
    return max(1, min(limits.max_connections, soft - reserve))


def accept_burst(limits: ConnectionLimits) -> int:
    """How many connections asyncio accepts per wake-up (uvicorn's `backlog`).

    Each is a descriptor before its connection is set up and can evict an idle one (whose
    descriptor is freed a loop turn later), so the cap plus two bursts must fit in the soft
    limit beside the reserve. The kernel's accept queue is set apart (`listen_queue`)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    cap = connection_cap(limits)
    if soft == resource.RLIM_INFINITY:
        return max(16, cap // 4)
    return max(16, min(cap // 4, (soft - cap) // 8))


def listen_queue() -> int:
    """The kernel's accept queue for kiln dev's socket: as long as the system allows.

    A short queue drops the SYN of a client arriving while a flood fills it, and TCP then
    retries after 1, 3, 7, 15 s: a ping waits on the retries, not on the server."""
    try:
        with open("/proc/sys/net/core/somaxconn", encoding="ascii") as file:
            return max(128, int(file.read().strip()))
    except (OSError, ValueError):
        return 4096


class DeepQueueServer(uvicorn.Server):
    """uvicorn's server, its sockets listening with `listen_queue()` once it has started.

    uvicorn gives asyncio one `backlog` for two things: the kernel's accept queue and how many
    connections are accepted per wake-up. The second must stay small (`accept_burst`); the
    first is set here, after asyncio's own `listen`, to as long as the system allows."""

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        for sock in sockets or ():
            sock.listen(listen_queue())


@dataclass
class IdleConnections:
    """Open connections with no request in progress, oldest first, overall and per client
    address: adding, removing and finding the oldest cost the same however many are open."""

    everyone: OrderedDict[object, None] = field(default_factory=OrderedDict)
    by_client: dict[str, OrderedDict[object, None]] = field(default_factory=dict)

    def add(self, conn: object, client: str) -> None:
        """`conn` is idle from now (moved to the young end if it was already idle)."""
        self.everyone[conn] = None
        self.everyone.move_to_end(conn)
        own = self.by_client.setdefault(client, OrderedDict())
        own[conn] = None
        own.move_to_end(conn)

    def discard(self, conn: object, client: str) -> None:
        self.everyone.pop(conn, None)
        own = self.by_client.get(client)
        if own is not None:
            own.pop(conn, None)
            if not own:
                del self.by_client[client]

    def oldest(
        self, client: str, but: object, waiting: Callable[[object], bool] = lambda _: False
    ) -> object | None:
        """The longest-idle connection of `client`, else of anyone; never `but`, and not one
        whose request is `waiting` to be read (up to PASS_OVER_AT_MOST of those)."""
        passed = 0
        for pool in (self.by_client.get(client), self.everyone):
            for conn in pool or ():
                if conn is but:
                    continue
                if passed < PASS_OVER_AT_MOST and waiting(conn):
                    passed += 1
                    continue
                return conn
        return None


_BAD_REQUEST = dumps(
    jsonrpc_error(INVALID_REQUEST, "Invalid Request: the HTTP request could not be parsed")
)


def _answer_bad_request(conn: h11.Connection, transport: asyncio.Transport) -> None:
    """A JSON 400 for bytes that are not HTTP, then close (uvicorn would answer text/plain)."""
    headers = [(b"content-type", b"application/json"), (b"connection", b"close")]
    for event in (
        h11.Response(status_code=400, headers=headers, reason=b"Bad Request"),
        h11.Data(data=_BAD_REQUEST),
        h11.EndOfMessage(),
    ):
        transport.write(conn.send(event))
    transport.close()


def hardened_protocol(limits: ConnectionLimits) -> type[H11Protocol]:
    """An h11 protocol class for uvicorn's `http=` that enforces `limits` (see module doc)."""

    class HardenedH11Protocol(_HardenedH11Protocol):
        _limits = limits
        _cap = connection_cap(limits)
        _idle_set = IdleConnections()

    return HardenedH11Protocol


class _HardenedH11Protocol(H11Protocol):
    """The hardened protocol; `hardened_protocol` makes a subclass with its limits and cap."""

    _limits: ClassVar[ConnectionLimits]
    _cap: ClassVar[int]
    _idle_set: ClassVar[IdleConnections]
    _timer: asyncio.TimerHandle | None = None
    _reading = False  # a request has started arriving and has not fully arrived
    _host = ""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._host = self.client[0] if self.client else ""
        self._idle_set.add(self, self._host)
        self._arm(self._limits.idle_timeout_s)
        if len(self.connections) > self._cap and not self._evict_one():
            log.warning("connection cap (%d) reached with every connection busy", self._cap)
            self._close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self._idle_set.discard(self, self._host)
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if not self._reading:
            self._reading = True
            self._idle_set.discard(self, self._host)
            self._arm(self._limits.request_timeout_s)  # a request started: it must now finish
        super().data_received(data)
        if self.conn.their_state not in (h11.IDLE, h11.SEND_BODY):
            self._reading = False  # the whole request arrived (or the connection is ending)
            self._disarm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        kept = not self._reading and self._idle() and not self.transport.is_closing()
        if kept and self.conn.their_state is h11.IDLE:
            self._idle_set.add(self, self._host)  # kept alive: idle, the youngest

    def send_400_response(self, msg: str) -> None:
        _answer_bad_request(self.conn, self.transport)

    def _idle(self) -> bool:
        return self.cycle is None or self.cycle.response_complete

    def _arm(self, seconds: float) -> None:
        self._disarm()
        self._timer = self.loop.call_later(seconds, self._expire)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expire(self) -> None:
        self._timer = None
        if self.conn.their_state in (h11.IDLE, h11.SEND_BODY):
            self._close()

    def _close(self) -> None:
        self._disarm()
        if not self.transport.is_closing():
            self.transport.close()

    def _evict_one(self) -> bool:
        """Close the longest-idle other connection, this client's own first; False when every
        other connection is busy."""
        victim = self._idle_set.oldest(self._host, but=self, waiting=_request_waiting)
        if not isinstance(victim, _HardenedH11Protocol):
            return False
        victim._idle_set.discard(victim, victim._host)
        victim._close()
        return True


def _request_waiting(conn: object) -> bool:
    """Bytes have arrived on `conn` that the loop has not read yet (FIONREAD)."""
    transport = getattr(conn, "transport", None)
    sock = transport.get_extra_info("socket") if transport is not None else None
    if sock is None:
        return False
    try:
        unread = fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0\0\0\0")
    except (OSError, ValueError):  # closed meanwhile
        return False
    return bool(struct.unpack("i", unread)[0])


class RateLimit(logging.Filter):
    """Lets through `burst` records per message per `interval_s`; counts the rest."""

    def __init__(self, burst: int = 5, interval_s: float = 10.0) -> None:
        super().__init__()
        self._burst = burst
        self._interval = interval_s
        self._windows: dict[str, tuple[float, int]] = {}  # message -> (window start, count)

    def filter(self, record: logging.LogRecord) -> bool:
        key = str(record.msg)[:200]
        now = time.monotonic()
        start, count = self._windows.get(key, (now, 0))
        if now - start >= self._interval:
            if count > self._burst:
                record.msg = f"{record.msg} ({count - self._burst} similar lines left out)"
            start, count = now, 0
        self._windows[key] = (start, count + 1)
        if len(self._windows) > 1000:  # many distinct messages: start over rather than grow
            self._windows.clear()
        return count < self._burst


def limit_log_rate(*names: str, **kwargs: Any) -> RateLimit:
    """Attach one RateLimit filter to each named logger (and return it)."""
    limit = RateLimit(**kwargs)
    for name in names or ("asyncio", "uvicorn.error"):
        logging.getLogger(name).addFilter(limit)
    return limit
