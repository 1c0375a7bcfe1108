"""What every `kiln` command shares: the server client it talks to, one way to fail, and one
way to declare a subcommand (`subcommand`).

A failure is one line on stderr, `kiln <command>: <what went wrong>`, and exit status 1
(2 for a usage error, as argparse uses).
"""

from __future__ import annotations

import argparse
import functools
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


Command = Callable[[argparse.Namespace], int]


def talks(command: str, *also: type[Exception]) -> Callable[[Command], Command]:
    """A command that talks to a server: a server it cannot find, a refusal it is answered
    (or one of `also`, a problem found before asking) is `fail(command, error)`."""

    def wrap(run: Command) -> Command:
        @functools.wraps(run)
        def talking(args: argparse.Namespace) -> int:
            from kiln.cli.client import ApiCallError
            from kiln.cli.locate import ServerNotFoundError

            caught: tuple[type[Exception], ...] = (ApiCallError, ServerNotFoundError, *also)
            try:
                return run(args)
            except caught as error:
                return fail(command, error)

        return talking

    return wrap


def subcommand(
    group: Any,
    name: str,
    run: Command,
    help: str,
    *positionals: str,
    json: bool = False,
    options: Callable[[argparse.ArgumentParser], argparse.ArgumentParser] | None = None,
) -> argparse.ArgumentParser:
    """A subcommand of `group` (an argparse subparsers action) that `run` runs: its positional
    arguments, `--json` when it can print JSON, and `options` (the server options) applied."""
    parser: argparse.ArgumentParser = group.add_parser(name, help=help)
    for positional in positionals:
        parser.add_argument(positional)
    if json:
        parser.add_argument("--json", action="store_true", help="print JSON")
    parser.set_defaults(func=run)
    return options(parser) if options is not None else parser


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
