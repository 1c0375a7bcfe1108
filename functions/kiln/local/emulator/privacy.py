"""A state directory only its owner can enter: 0700 directories, files 0600 (0400 read-only).

The directory holds the emulator's journal (the whole catalog, tool secrets included), its
signing key and the author key. Files are created private (umask) and an existing tree is
made private again at start, in case an older Kiln or a user left it open.
"""

from __future__ import annotations

import ctypes
import os
import stat
from collections.abc import Callable
from pathlib import Path

PRIVATE_UMASK = 0o077
_PR_SET_DUMPABLE = 4


def secure_tree(root: Path) -> None:
    """Create `root` if missing and make it and everything under it private to its owner:
    folders 0700, files stripped of every group and other bit (0644 becomes 0600, a
    read-only 0444 stays read-only as 0400: the build cache checks its packages by it)."""
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(root, 0o700)
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames:
            _chmod(Path(dirpath, name), lambda _: 0o700)
        for name in filenames:
            _chmod(Path(dirpath, name), lambda mode: mode & 0o700)


def _chmod(path: Path, private: Callable[[int], int]) -> None:
    try:
        info = path.lstat()
    except FileNotFoundError:
        return
    if stat.S_ISLNK(info.st_mode):
        return  # never follow a link out of the tree
    mode = stat.S_IMODE(info.st_mode)
    if private(mode) != mode:
        os.chmod(path, private(mode))


def write_private(path: Path, data: bytes) -> None:
    """Write a file readable by its owner only, atomically, never briefly open to others."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    tmp.replace(path)


def not_dumpable() -> None:
    """Keep same-user processes out of this process's memory and /proc files (Linux)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: nothing to do
        pass
