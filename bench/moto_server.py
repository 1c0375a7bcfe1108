"""A benchmark's own store: a moto server on a free loopback port, stopped when done."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def moto_endpoint() -> Iterator[str]:
    """Start moto (with its test credentials set where none are) and yield its URL: the tests'
    own server (tests.support.aws.plain_moto), quiet."""
    from tests.support.aws import plain_moto

    for variable in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        os.environ.setdefault(variable, "testing")  # moto's
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # its request log
    with plain_moto() as endpoint:
        yield endpoint
