"""The emulator's write-ahead journal: every accepted write, on disk before it is answered.

A record is one request as it reached the emulator (method, path, query, the headers moto
routes and parses by, the body) or a remembered idempotency token. Records are framed
(length + CRC-32), so a record torn by a crash mid-append is recognised and dropped: its
request was never answered, so no one was told it happened.

Compaction rewrites the journal as the state it leads to (a table and its items, a bucket
and its objects, the tokens still within their window), written to a new file, synced,
then renamed over the old one: at every instant one complete journal is on disk. While the
emulator serves, a child process compacts a prefix of the journal (compactor.py) and
`adopt` appends what was written since to its result before the rename.
"""

from __future__ import annotations

import json
import os
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

_FRAME = struct.Struct(">II")  # payload length, CRC-32 of the payload
MAX_RECORD = 1 << 31


@dataclass(frozen=True)
class Record:
    """One journal entry: a request to replay, or (kind "token") a remembered token."""

    kind: str  # "request" | "token"
    meta: dict[str, Any] = field(default_factory=dict)
    body: bytes = b""

    def encode(self) -> bytes:
        head = json.dumps({"kind": self.kind, **self.meta}, separators=(",", ":")).encode()
        payload = struct.pack(">I", len(head)) + head + self.body
        return _FRAME.pack(len(payload), zlib.crc32(payload)) + payload

    @classmethod
    def decode(cls, payload: bytes) -> Record:
        (size,) = struct.unpack_from(">I", payload)
        meta = json.loads(payload[4 : 4 + size])
        return cls(kind=meta.pop("kind"), meta=meta, body=payload[4 + size :])


def read_records(path: Path, upto: int | None = None) -> tuple[list[Record], int]:
    """Every whole record in the file (in its first `upto` bytes if given), and the byte
    length they take (a torn tail excluded)."""
    records: list[Record] = []
    if not path.is_file():
        return records, 0
    with path.open("rb") as handle:
        data = handle.read() if upto is None else handle.read(upto)
    offset = 0
    while offset + _FRAME.size <= len(data):
        length, crc = _FRAME.unpack_from(data, offset)
        start = offset + _FRAME.size
        payload = data[start : start + length]
        if len(payload) != length or zlib.crc32(payload) != crc:
            break  # torn by a crash mid-append: never acknowledged
        records.append(Record.decode(payload))
        offset = start + length
    return records, offset


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Journal:
    """Appends records durably; `replace_with` swaps in a compacted journal atomically."""

    def __init__(self, path: Path, *, valid_length: int, sync: bool = True) -> None:
        self.path = path
        self._sync = sync
        self.records = 0
        self.bytes = valid_length
        self._file = self._open(valid_length)

    def _open(self, valid_length: int) -> IO[bytes]:
        handle = open(self.path, "ab")  # noqa: SIM115 -- held open for the server's life
        handle.truncate(valid_length)  # drop a torn tail before appending after it
        os.chmod(self.path, 0o600)
        return handle

    def append(self, record: Record) -> None:
        """Write one record and return only once it is on stable storage."""
        data = record.encode()
        self._file.write(data)
        self._file.flush()
        if self._sync:
            os.fdatasync(self._file.fileno())
        self.records += 1
        self.bytes += len(data)

    def replace_with(self, records: Iterator[Record]) -> None:
        """Make `records` the whole journal (compaction), crash-safe at every step."""
        fresh = self.path.with_name(self.path.name + ".new")
        count = size = 0
        with open(fresh, "wb") as out:
            os.chmod(fresh, 0o600)
            for record in records:
                data = record.encode()
                out.write(data)
                count += 1
                size += len(data)
            out.flush()
            os.fsync(out.fileno())
        fresh.replace(self.path)
        fsync_dir(self.path.parent)
        self._file.close()
        self._file = self._open(size)
        self.records, self.bytes = count, size

    def adopt(self, fresh: Path, records: int, since: int, since_records: int) -> None:
        """Make `fresh` the journal: a synced compaction (`records` records) of this journal's
        first `since` bytes (`since_records` records). Call with the writers' lock held.

        The records appended after `since` are copied to its end and synced before the
        rename, so the journal on disk holds every acknowledged write at every instant: the
        old one until the rename, the new one after.
        """
        size = fresh.stat().st_size
        with self.path.open("rb") as old, fresh.open("ab") as out:
            old.seek(since)
            left = self.bytes - since
            while left > 0:
                chunk = old.read(min(left, 1 << 20))
                if not chunk:
                    raise OSError(f"{self.path} is shorter than its acknowledged records")
                out.write(chunk)
                left -= len(chunk)
            out.flush()
            os.fsync(out.fileno())
        fresh.replace(self.path)
        # From here on appends must go to the new file, even if syncing the rename fails.
        self._file.close()
        appended = self.bytes - since
        self._file = self._open(size + appended)
        self.records = records + self.records - since_records
        self.bytes = size + appended
        fsync_dir(self.path.parent)

    def close(self) -> None:
        self._file.close()
