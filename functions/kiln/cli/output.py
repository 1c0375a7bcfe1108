"""What every `kiln` command shares: the server client it talks to, and one way to fail.

A failure is one line on stderr, `kiln <command>: <what went wrong>`, and exit status 1
(2 for a usage error, as argparse uses).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any


def client(args: argparse.Namespace) -> Any:
    """The REST client for the server the command names (or the running `kiln dev`)."""
    from kiln.cli.client import client_for

    return client_for(args)


def fail(command: str, error: object, *, status: int = 1) -> int:
    print(f"kiln {command}: {error}", file=sys.stderr)
    return status
