"""The local state directory as a running `kiln dev` keeps it: where it serves (`server.json`,
written while it serves, removed when it stops) and the local author key. `kiln dev` writes
it; the `kiln` command reads it to find the server (`kiln.cli.locate`)."""

from __future__ import annotations

import json
import os
from pathlib import Path

SERVER_RECORD = "server.json"
AUTHOR_KEY_FILE = "author_key"


def private_dir(path: Path) -> Path:
    """Make `path` (mode 0700 when new) and return it."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path


def write_private(path: Path, text: str) -> None:
    """Write a file only its owner can read, atomically."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    tmp.replace(path)


def record_server(state_dir: Path, url: str) -> None:
    """Note that this process serves the state directory's catalog at `url`."""
    record = {"url": url, "pid": os.getpid()}
    write_private(private_dir(state_dir) / SERVER_RECORD, json.dumps(record) + "\n")


def forget_server(state_dir: Path) -> None:
    path = state_dir / SERVER_RECORD
    try:
        if json.loads(path.read_text("utf-8")).get("pid") == os.getpid():
            path.unlink()
    except (OSError, ValueError, AttributeError):
        pass


def running_server(state_dir: Path) -> str | None:
    """The URL of the `kiln dev` serving this state directory, if one is running."""
    try:
        record = json.loads((state_dir / SERVER_RECORD).read_text("utf-8"))
        url, pid = str(record["url"]), int(record["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None  # left behind by a kiln dev that was killed
    except PermissionError:
        pass  # alive, someone else's
    return url


def local_author_key(state_dir: Path) -> str | None:
    try:
        return (state_dir / AUTHOR_KEY_FILE).read_text("utf-8").strip() or None
    except OSError:
        return None
