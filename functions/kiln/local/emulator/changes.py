"""The emulator's count of catalog-visible writes, shared with the processes that read it.

Every request of `kiln dev` reads the catalog's version number (one strongly consistent
GetItem) so that a change made by any process is seen on the next request. Against the local
emulator that read is an HTTP round trip to another Python process: on a busy machine it is
most of what a tools/list costs. But every write goes through the emulator, so the emulator
can say when one may have moved the version: it bumps a counter in a small shared file
(`changes` in its state directory) after applying such a write and before answering it.
A reader compares the counter with the one it saw before its last version read; equal means
no write that could change the catalog was acknowledged since, and the snapshot it holds is
still the catalog. Only equality is trusted: a different, unreadable or missing counter
means "read the version".

Which writes count (over-counting costs one read, under-counting would serve a stale
catalog): every DynamoDB write except item writes whose body does not name the version
item's sort key ("VERSION"); a body with a `\\u` escape counts, since it could spell the key.
The file holds a random epoch (new at each emulator start, so a restarted emulator never
matches an old mark) and the count, rewritten in place: readers map the same inode.
"""

from __future__ import annotations

import mmap
import os
import secrets
import struct
from pathlib import Path

CHANGES_FILE = "changes"
_FORMAT = "<8sQ"  # epoch, count: 16 bytes, both 8-byte aligned (single stores on x86-64/arm64)
_SIZE = struct.calcsize(_FORMAT)
# Item writes touch named items only; anything else (tables, TTL, restores) always counts.
_ITEM_WRITES = frozenset(
    {"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems"}
)


def may_change_catalog(operation: str, body: bytes) -> bool:
    """Whether a DynamoDB write could have changed the catalog's version item."""
    if operation not in _ITEM_WRITES:
        return True
    return b'"VERSION"' in body or b"\\u" in body


class ChangeCounter:
    """The emulator's side: owns the file, bumps the count."""

    def __init__(self, state_dir: Path) -> None:
        path = state_dir / CHANGES_FILE
        # In place, never replaced: a reader's mapping must keep seeing this file.
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            os.fchmod(fd, 0o600)
            os.ftruncate(fd, _SIZE)
            self._map = mmap.mmap(fd, _SIZE)
        finally:
            os.close(fd)
        self._epoch = secrets.token_bytes(8)
        self._count = 0
        struct.pack_into(_FORMAT, self._map, 0, self._epoch, 0)

    def bump(self) -> None:
        """Called under the emulator's writers' lock, after the write, before its reply."""
        self._count += 1
        struct.pack_into("<Q", self._map, 8, self._count)


class ChangeMark:
    """A reader's side: the current (epoch, count), or None when there is no usable file."""

    def __init__(self, path: Path) -> None:
        self._map: mmap.mmap | None = None
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            return
        try:
            if os.fstat(fd).st_size == _SIZE:
                self._map = mmap.mmap(fd, _SIZE, access=mmap.ACCESS_READ)
        finally:
            os.close(fd)

    def __call__(self) -> bytes | None:
        return None if self._map is None else self._map[:_SIZE]
