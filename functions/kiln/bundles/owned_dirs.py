"""Directories Kiln loads code or settings from under a shared /tmp: its own, checked first.

A path under /tmp that any user can predict (`/tmp/kiln-bundles/<hash of requirements>`)
can be made first by another local user, with their code in it. So a directory Kiln reads
code from must be one its own uid made, not writable by anyone else, and not a link; the
default places carry the uid in their name (`/tmp/kiln-bundles-1000`), so two users of one
machine each have their own, and a name someone else took first is passed over for a fresh,
unpredictable one.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import stat
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)


class UnsafeDirectoryError(OSError):
    """A directory Kiln would load code from is not Kiln's alone."""


def owned_directory(path: Path, mode: int = 0o755) -> Path:
    """`path`, made with `mode` if absent; raises UnsafeDirectoryError unless it is this uid's
    own directory (not a link) that no other user can write."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, mode)
    info = os.lstat(path)
    uid = os.geteuid()
    if not stat.S_ISDIR(info.st_mode):
        problem = "is not a directory (a link or a file)"
    elif info.st_uid != uid:
        problem = f"belongs to uid {info.st_uid}, not to this server's uid {uid}"
    elif info.st_mode & 0o022:
        problem = f"can be written by other users (mode {stat.S_IMODE(info.st_mode):o})"
    else:
        return path
    raise UnsafeDirectoryError(
        f"{path} {problem}: Kiln loads code from it, so it must be Kiln's alone; "
        "remove it, or name another place"
    )


@functools.cache
def temp_place(name: str) -> Path:
    """`<tmp>/<name>-<uid>`, this process's own; a fresh one when another user took that name."""
    preferred = Path(tempfile.gettempdir()) / f"{name}-{os.geteuid()}"
    try:
        return owned_directory(preferred)
    except UnsafeDirectoryError as error:
        fresh = Path(tempfile.mkdtemp(prefix=f"{name}-{os.geteuid()}-"))
        fresh.chmod(0o755)  # runs of other uids read bundles from it
        log.warning("%s; using %s instead", error, fresh)
        return fresh
