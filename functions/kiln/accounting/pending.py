"""Ledger entries kept on local disk until the store has them (`kiln dev`).

On `kiln dev` an answered call must be in the ledger even if the server is killed the moment
after. Writing its entry to the store before the answer cost every call a round trip to the
local emulator (10 to 30 ms on this kind of machine when the entry was a two-item
transaction), two to three times a trivial tool's whole run.

Instead, before the answer, the entry's item is appended to a file in the state directory
and fdatasync'ed (under a millisecond); one background thread writes it to the store right
after, in the order the calls ended. A ledger query in this process first waits for the
entries answered before it (`drain`). At start, `replay` writes what the file still holds,
skipping an entry the store has already. A present entry was counted in the day's totals by
the run that wrote it (which loses at most what it had not flushed, as
`kiln.accounting.ledger_totals` states); a replayed one is counted now; none is counted twice.

A store slower than the calls does not make the file (or the queue) grow without end: past
`limit` entries waiting, `hold` waits for the writer, so answers slow down as they did when
each call wrote its own entry.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

log = logging.getLogger("kiln.accounting.pending")

Item = Mapping[str, Any]
WRITE_ATTEMPTS = 3  # then the entry stays in the file and is written at the next start
REWRITE_BYTES = 1 << 20  # the file is rewritten with only what waits once it is this long


class PendingLedger:
    """The file of entries answered but maybe not yet in the store, and their writer."""

    def __init__(
        self,
        path: Path,
        write: Callable[[Item], None],
        present: Callable[[Item], bool],
        *,
        limit: int = 256,
        later: Callable[[Callable[[], None]], None] | None = None,
    ) -> None:
        self.path = path
        self._write, self._present, self._limit = write, present, limit
        # How the writer is woken for a held entry: at once, or once the answer it belongs to
        # has been sent (kiln dev passes kiln.runner.afterwards.later), so that the store
        # write does not compete with that answer for the interpreter.
        self._later = later
        self._waiting: dict[int, bytes] = {}  # number -> its line, until the store has it
        self._queue: list[int] = []
        self._held = self._done = 0  # entries held so far; of those, written (or given up)
        self._bytes = 0  # in the file now
        self._changed = threading.Condition()
        self._file: BinaryIO | None = None
        self._thread: threading.Thread | None = None
        self._closed = False

    def replay(self) -> int:
        """Write the entries a previous run left in the file (before serving); how many."""
        written = 0
        for item in _read_items(self.path):
            if self._present(item):
                continue
            self._write(item)
            written += 1
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.fsync(fd)
        os.close(fd)
        if written:
            log.info("wrote %d ledger entries a previous run had answered", written)
        return written

    def start(self) -> None:
        self._file = self.path.open("ab")
        self._thread = threading.Thread(target=self._run, name="kiln-ledger", daemon=True)
        self._thread.start()

    def hold(self, item: Item) -> None:
        """Keep `item` on disk (returns once it is on stable storage); the store gets it soon."""
        line = json.dumps(item, separators=(",", ":")).encode() + b"\n"
        with self._changed:
            if self._file is None or self._closed:
                raise RuntimeError("the pending ledger is not running")
            while self._held - self._done >= self._limit:
                self._changed.wait()
            self._file.write(line)
            self._file.flush()
            os.fdatasync(self._file.fileno())
            self._bytes += len(line)
            self._held += 1
            self._waiting[self._held] = line
            self._queue.append(self._held)
            if self._later is None:
                self._changed.notify_all()
        if self._later is not None:
            self._later(self._wake)

    def _wake(self) -> None:
        with self._changed:
            self._changed.notify_all()

    def drain(self, timeout_s: float | None = None) -> bool:
        """Wait until every entry held so far has been written (or given up on)."""
        with self._changed:
            target = self._held
            self._changed.notify_all()  # the writer, should its wake wait for an answer
            return self._changed.wait_for(lambda: self._done >= target, timeout_s)

    def close(self, timeout_s: float = 10.0) -> None:
        """Write what waits (for up to `timeout_s`), then stop; the rest waits in the file."""
        self.drain(timeout_s)
        with self._changed:
            self._closed = True
            self._changed.notify_all()
        if self._thread is not None:
            self._thread.join(timeout_s)
        with self._changed:
            if self._file is not None:
                self._file.close()
                self._file = None

    def _run(self) -> None:
        while True:
            with self._changed:
                self._changed.wait_for(lambda: self._queue or self._closed)
                if not self._queue:
                    return
                number = self._queue.pop(0)
                line = self._waiting[number]
            stored = self._store(json.loads(line))
            with self._changed:
                if stored:
                    del self._waiting[number]
                self._done += 1
                self._tidy()
                self._changed.notify_all()

    def _store(self, item: Item) -> bool:
        for attempt in range(WRITE_ATTEMPTS):
            try:
                self._write(item)
                return True
            except Exception:
                if attempt + 1 == WRITE_ATTEMPTS:
                    log.exception("a call's ledger entry is not in the store yet (kept in %s "
                                  "and written at the next start)", self.path)  # fmt: skip
                else:
                    time.sleep(0.1 * (attempt + 1))
        return False

    def _tidy(self) -> None:
        """Under the lock: empty the file once nothing waits, rewrite it when it grew long."""
        assert self._file is not None
        if not self._waiting:
            self._file.truncate(0)  # no fsync: entries that come back are skipped at replay
            self._bytes = 0
        elif self._bytes > REWRITE_BYTES:
            fresh = self.path.with_name(self.path.name + ".new")
            with fresh.open("wb") as out:
                out.writelines(self._waiting.values())
                out.flush()
                os.fsync(out.fileno())
            os.replace(fresh, self.path)
            self._bytes = sum(map(len, self._waiting.values()))
            self._file.close()
            self._file = self.path.open("ab")


def stored_in(dynamodb: DynamoDBClient, table: str) -> Callable[[Item], bool]:
    """Whether the store has an entry's item (a strongly consistent read of its key)."""

    def present(item: Item) -> bool:
        key = {"pk": item["pk"], "sk": item["sk"]}
        found = dynamodb.get_item(
            TableName=table, Key=key, ConsistentRead=True, ProjectionExpression="pk"
        )
        return "Item" in found

    return present


def _read_items(path: Path) -> list[dict[str, Any]]:
    """The whole lines of the file; a line torn by a crash was never answered."""
    try:
        lines = path.read_bytes().split(b"\n")
    except FileNotFoundError:
        return []
    items = []
    for line in lines[:-1]:  # the last part has no newline: empty, or torn
        try:
            items.append(json.loads(line))
        except ValueError:
            log.warning("skipped an unreadable line in %s", path)
    return items
