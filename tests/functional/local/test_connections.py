"""`kiln dev` under abuse: idle floods past the fd limit, stalled or garbled requests."""

from __future__ import annotations

import json
import logging
import os
import resource
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from kiln.local.connections import RateLimit
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
