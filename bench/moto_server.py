"""A benchmark's own store: a moto server on a free loopback port, stopped when done."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def moto_endpoint() -> Iterator[str]:
    """Start moto (with its test credentials set where none are) and yield its URL."""
    from moto.server import ThreadedMotoServer

    for variable in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        os.environ.setdefault(variable, "testing")  # moto's
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # its request log
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        yield f"http://{host}:{port}"
    finally:
        server.stop()
