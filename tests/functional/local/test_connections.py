"""`kiln dev` under abuse: idle floods past the fd limit, stalled or garbled requests."""

from __future__ import annotations

import json
import logging
import os
import resource
import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from kiln.local.connections import ConnectionLimits, RateLimit, hardened_protocol
from support.devserver import serving

FD_LIMIT = 256
IDLE_FLOOD = 400  # more than the server has file descriptors for


def _lower_fd_limit() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (FD_LIMIT, FD_LIMIT))


@pytest.fixture
def dev(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """kiln dev with FD_LIMIT descriptors and short timeouts; yields its URL and log file."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "KILN_"))}
    env.update(KILN_IDLE_TIMEOUT_S="2", KILN_REQUEST_TIMEOUT_S="2")
    log_path = tmp_path / "dev.log"
    command = [*(sys.executable, "-m", "kiln.cli", "dev", "--port", "0"),
               *("--no-examples", "--state-dir", str(tmp_path / ".kiln"))]  # fmt: skip
    with serving(command, log_path, env=env, preexec_fn=_lower_fd_limit, timeout_s=60) as served:
        yield served.url, log_path


def _connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    sock.setblocking(False)
    return sock


def _closed_by_server(sock: socket.socket) -> bool:
    try:
        return sock.recv(65536) == b""
    except BlockingIOError:
        return False
    except ConnectionResetError:
        return True


def _wait_until_closed(socks: list[socket.socket], within_s: float) -> int:
    """How many of `socks` the server has closed, polling until all are or time is up."""
    deadline = time.monotonic() + within_s
    open_ = list(socks)
    while open_ and time.monotonic() < deadline:
        open_ = [s for s in open_ if not _closed_by_server(s)]
        time.sleep(0.05)
    return len(socks) - len(open_)


def _ping(url: str) -> httpx.Response:
    return httpx.post(
        url + "/mcp",
        json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
        headers={"MCP-Protocol-Version": "2025-11-25"},
        timeout=10,
    )


def test_mcp_answers_while_more_idle_connections_than_descriptors_are_open(
    dev: tuple[str, Path],
) -> None:
    url, log_path = dev
    port = int(url.rsplit(":", 1)[1])
    flood = [_connect(port) for _ in range(IDLE_FLOOD)]
    try:
        response = _ping(url)
        assert (response.status_code, response.json()["result"]) == (200, {})
        # Evicted past the cap, or closed at the idle timeout: none stays open for long.
        assert _wait_until_closed(flood, within_s=15) == IDLE_FLOOD
    finally:
        for sock in flood:
            sock.close()
    assert _ping(url).status_code == 200
    assert log_path.stat().st_size < 20_000, log_path.read_text()[-2000:]


def test_a_request_that_stops_mid_headers_is_closed_at_the_request_timeout(
    dev: tuple[str, Path],
) -> None:
    url, _ = dev
    port = int(url.rsplit(":", 1)[1])
    stalled = _connect(port)
    stalled.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Le")
    silent = _connect(port)
    try:
        assert _wait_until_closed([stalled, silent], within_s=15) == 2
    finally:
        stalled.close()
        silent.close()


def test_an_unparseable_http_request_gets_a_json_rpc_error(dev: tuple[str, Path]) -> None:
    url, _ = dev
    port = int(url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"POST /mcp HTTP/1.1\r\nHo st: x\r\n\r\n")
        raw = b""
        while chunk := sock.recv(65536):
            raw += chunk
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 ")
    assert b"content-type: application/json" in head.lower()
    assert json.loads(body)["error"]["code"] == -32600


def test_repeated_log_lines_are_let_through_a_few_times_per_interval() -> None:
    limit = RateLimit(burst=3, interval_s=3600)
    record = logging.LogRecord("asyncio", logging.ERROR, __file__, 1, "accept failed", (), None)
    passed = [limit.filter(record) for _ in range(1000)]
    assert passed.count(True) == 3
    other = logging.LogRecord("asyncio", logging.ERROR, __file__, 1, "another", (), None)
    assert limit.filter(other)


async def _answer(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """A bare ASGI app: `ok`, after blocking the server's event loop on /block."""
    if scope["type"] != "http":
        return
    if scope["path"] == "/block":
        time.sleep(1.0)  # noqa: ASYNC251 (on purpose: nothing is read, the kernel queues the rest)
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-length", b"2")]})  # fmt: skip
    await send({"type": "http.response.body", "body": b"ok"})


@pytest.fixture
def capped() -> Iterator[int]:
    """The hardened protocol on uvicorn, in this process, capped at 3 connections; its port."""
    limits = ConnectionLimits(max_connections=3, idle_timeout_s=30, request_timeout_s=30)
    config = uvicorn.Config(
        _answer, host="127.0.0.1", port=0, http=hardened_protocol(limits), lifespan="off",
        log_level="warning", backlog=64,
    )  # fmt: skip
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive(), "uvicorn stopped while starting (its error is printed above)"
        assert time.monotonic() < deadline, "uvicorn did not start in 30 s"
        time.sleep(0.02)
    yield server.servers[0].sockets[0].getsockname()[1]
    server.should_exit = True
    thread.join(30)


def test_a_request_waiting_unread_is_not_the_connection_evicted_for_a_newcomer(
    capped: int,
) -> None:
    """A flood's connections are accepted in bursts, and each past the cap evicts the
    longest-idle one before the loop reads anything. A ping whose request sat unread in that
    burst used to be that one: reset (1 of 315 pings in a 20,000-connection flood)."""
    old = socket.create_connection(("127.0.0.1", capped), timeout=5)
    blocker = socket.create_connection(("127.0.0.1", capped), timeout=5)
    blocker.sendall(b"GET /block HTTP/1.1\r\nHost: x\r\n\r\n")
    time.sleep(0.3)  # the loop is asleep in /block from here for a second
    ping = socket.create_connection(("127.0.0.1", capped), timeout=5)
    ping.sendall(b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n")
    newcomers = [socket.create_connection(("127.0.0.1", capped), timeout=5) for _ in range(3)]
    try:
        # The loop wakes: old, blocker, then newcomers[0] are evicted as the newcomers
        # arrive; the ping, older than the newcomers but with its request waiting, is not.
        ping.settimeout(10)
        answer = b""
        try:
            while not answer.endswith(b"\r\n\r\nok") and (chunk := ping.recv(65536)):
                answer += chunk  # the head and the body may come apart
        except ConnectionResetError:
            answer += b" (reset)"
        assert answer.startswith(b"HTTP/1.1 200 "), answer
        assert answer.endswith(b"ok"), answer
    finally:
        for sock in (old, blocker, ping, *newcomers):
            sock.close()
