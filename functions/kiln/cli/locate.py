"""How every `kiln` command finds the server to talk to and the key to send it.

One rule for all commands (`tools`, `bundles`, `keys`, `secrets`, `stdio --url`):

1. `--url` (or KILN_URL) names the server; the key is `--key`, else KILN_AUTHOR_KEY, else,
   only when that URL is the local `kiln dev`, the local author key.
2. Otherwise the server is the `kiln dev` recorded in the state directory's `server.json`
   (written while it serves, removed when it stops), with `--key`, KILN_AUTHOR_KEY or the
   state directory's `author_key`.
3. Otherwise the command fails, saying which file it looked at and how to fix it.

The local author key is never sent to a URL other than the recorded local server's: a typo in
`--url` must not hand the key to someone else's machine.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from kiln.local.state import AUTHOR_KEY_FILE, SERVER_RECORD, local_author_key, running_server
from kiln.settings import LocalSettings

STATE_HELP = (
    "local state directory (default: KILN_STATE_DIR, else $XDG_STATE_HOME/kiln, "
    "else ~/.local/state/kiln)"
)


def server_options(
    parser: argparse.ArgumentParser,
    *,
    state_help: str = STATE_HELP,
    aws_help: str | None = None,
) -> argparse.ArgumentParser:
    """Add --url, --key and --state-dir, which name the server as the rule above says; with
    `aws_help`, also --aws: work on the environment's AWS resources instead of a server."""
    parser.add_argument("--url", default=None, help="a Kiln server (default: the local kiln dev)")
    parser.add_argument("--key", default=None, help="author key (default: KILN_AUTHOR_KEY)")
    parser.add_argument("--state-dir", default=None, help=state_help)
    if aws_help is not None:
        parser.add_argument("--aws", action="store_true", help=aws_help)
    return parser


class ServerNotFoundError(Exception):
    """No server was named and no running `kiln dev` is recorded; says where Kiln looked."""


@dataclass(frozen=True)
class ServerTarget:
    url: str
    key: str | None
    key_source: str  # which key is sent, or why none is: completes "HTTP 401: ... (sent …)"


def find_server(local: LocalSettings, *, url: str | None, key: str | None) -> ServerTarget:
    """The server and key a command uses (see the module docstring for the rule)."""
    state = local.state_dir
    recorded = running_server(state)
    named = url or local.url
    given = key or local.author_key
    given_source = "the key from " + ("--key" if key else "KILN_AUTHOR_KEY")
    if named:
        if given:
            return ServerTarget(named, given, given_source)
        if recorded is not None and _same_server(named, recorded):
            return _with_local_key(named, state)
        return ServerTarget(named, None, "no key: pass --key KEY or set KILN_AUTHOR_KEY")
    if recorded is not None:
        if given:
            return ServerTarget(recorded, given, given_source)
        return _with_local_key(recorded, state)
    raise ServerNotFoundError(
        f"no running kiln dev found: looked for {state / SERVER_RECORD} (state directory from "
        f"{local.state_dir_source}). Start `kiln dev` (same state directory), or name a server "
        "with --url URL --key KEY (or KILN_URL and KILN_AUTHOR_KEY)"
    )


def _with_local_key(url: str, state: Path) -> ServerTarget:
    path = state / AUTHOR_KEY_FILE
    key = local_author_key(state)
    if key is None:
        return ServerTarget(url, None, f"no key: {path} is missing; pass --key KEY")
    return ServerTarget(url, key, f"the local author key from {path}")


def _same_server(a: str, b: str) -> bool:
    def norm(url: str) -> str:
        return url.rstrip("/").replace("://localhost:", "://127.0.0.1:")

    return norm(a) == norm(b)
