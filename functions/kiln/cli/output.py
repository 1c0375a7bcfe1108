"""What every `kiln` command shares: the server client it talks to, and one way to fail.

A failure is one line on stderr, `kiln <command>: <what went wrong>`, and exit status 1
(2 for a usage error, as argparse uses).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kiln.cli.client import KilnClient


def client(args: argparse.Namespace) -> KilnClient:
    """The REST client for the server the command names (or the running `kiln dev`)."""
    from kiln.cli.client import client_for

    return client_for(args)


def fail(command: str, error: object, *, status: int = 1) -> int:
    print(f"kiln {command}: {error}", file=sys.stderr)
    return status


def listing(
    items: Sequence[Any], line: Callable[[Any], str], *, as_json: bool, empty: str = ""
) -> int:
    """A list command's output: the items as JSON (`--json`), else one `line` each (or
    `empty` when there are none)."""
    if as_json:
        print(json.dumps(list(items), indent=2))
        return 0
    if not items and empty:
        print(empty)
    for item in items:
        print(line(item).rstrip())
    return 0


def print_rows(rows: Sequence[tuple[str, ...]]) -> None:
    """Columns as wide as their widest cell, two spaces apart."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
