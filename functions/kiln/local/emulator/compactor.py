"""Compaction off the write path: a child process compacts the journal while writes go on.

Compacting in the emulator itself meant dumping the whole state under the writers' lock
(about 3 s with 5,000 items), so the write that reached the threshold, and every write
behind it, waited for it. Instead, under the writers' lock and at once, the emulator notes
the journal's length (a prefix no later write changes: the journal is append-only) and
starts `python -m kiln.local.emulator.compactor`. That child replays the prefix into a moto of
its own, dumps the state it leads to into a new file, syncs it and exits. Back under the
writers' lock, `Journal.adopt` appends the records written meanwhile to that file, syncs
it and renames it over the journal. The only wait a write can meet is that copy of the
records written during one compaction.

Durability does not change: until the rename the journal is the old file, which every
acknowledged write was synced to; after it, the new file, which holds the same writes.
A kill -9 of the emulator at any point leaves one of the two; a dead or failed child leaves
the old journal in use (its file is removed, the next compaction starts after another
`compact_after` writes). The child exits when its stdin closes, so it does not outlive an
emulator that was killed.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from kiln.local.emulator.durable import DurableEmulator
from kiln.local.emulator.journal import Journal, read_records
from kiln.local.emulator.privacy import PRIVATE_UMASK, not_dumpable

log = logging.getLogger("kiln.local.emulator")
PARTIAL_PREFIX = "journal.compacting-"  # the child's output until it is adopted
NOT_COMPACTABLE = 3  # the child's exit status when the journal holds writes to other services


def remove_leftovers(state_dir: Path) -> None:
    """Outputs of compactions a killed emulator never adopted (the journal is whole)."""
    for leftover in state_dir.glob(PARTIAL_PREFIX + "*"):
        leftover.unlink(missing_ok=True)


class BackgroundCompactor:
    """Starts a compaction once the journal has grown by `compact_after` records, or by as
    many as the last compaction kept if that is more (each replays the whole journal, so
    a fixed step would make the work per write grow with the data: with a ledger of 100,000
    calls a compaction ran all the time), one at a time, and adopts its result."""

    def __init__(self, emulator: DurableEmulator, compact_after: int) -> None:
        self.emulator = emulator
        self.compact_after = compact_after
        self.next_at = self._after(emulator.journal.records)
        self.running = False
        self.given_up = False  # the journal holds writes the dump cannot rebuild
        self._runs = 0

    def after_append(self) -> None:
        """Called with the writers' lock held, after each journaled write."""
        journal = self.emulator.journal
        if self.running or self.given_up or journal.records < self.next_at:
            return
        if self.emulator.foreign_writes:
            self.given_up = True
            return
        self.running = True
        self._runs += 1
        out = journal.path.with_name(f"{PARTIAL_PREFIX}{os.getpid()}-{self._runs}")
        snapshot = (journal.bytes, journal.records)
        threading.Thread(
            target=self._run, args=(out, *snapshot), name="kiln-compaction", daemon=True
        ).start()

    def _run(self, out: Path, since: int, since_records: int) -> None:
        try:
            records = self._compact(out, since)
            with self.emulator.writers:
                journal = self.emulator.journal
                if records is None:
                    self.next_at = journal.records + self.compact_after
                else:
                    journal.adopt(out, records, since, since_records)
                    self.next_at = self._after(records)
                self.running = False
                self.after_append()  # the writes made meanwhile may already be enough
        except Exception:
            log.exception("compacting the journal failed; it is kept whole")
            with self.emulator.writers:
                self.next_at = self.emulator.journal.records + self.compact_after
                self.running = False
        finally:
            _remove(out)  # adopted (renamed away) or not to be used

    def _after(self, kept: int) -> int:
        """When the next compaction starts, for a journal of `kept` records."""
        return kept + max(self.compact_after, kept)

    def _compact(self, out: Path, since: int) -> int | None:
        """Run the child; the number of records it wrote, or None if there is nothing to
        adopt."""
        command = [sys.executable, "-m", "kiln.local.emulator.compactor"]
        command += ["--journal", str(self.emulator.journal.path), "--upto", str(since)]
        command += ["--out", str(out)]
        child = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert child.stdin is not None
        assert child.stdout is not None
        try:
            answer = child.stdout.read()  # stdin stays open: its end of file means "stop"
            status = child.wait()
        finally:
            child.stdin.close()
            child.stdout.close()
        if status == NOT_COMPACTABLE:
            self.given_up = True
            return None
        if status != 0:
            log.warning("the journal's compaction stopped (status %s); it is kept whole", status)
            return None
        return int(json.loads(answer)["records"])


def _remove(out: Path) -> None:
    """The child's output and the file it writes before renaming it to `out`."""
    out.unlink(missing_ok=True)
    out.with_name(out.name + ".new").unlink(missing_ok=True)


def _exit_with_parent(out: Path) -> None:
    def watch() -> None:
        # The raw descriptor, not sys.stdin: a thread blocked in the buffered reader's lock
        # makes the interpreter's exit abort.
        while os.read(0, 65536):
            pass
        _remove(out)
        os._exit(1)  # the emulator is gone: no one will adopt the result

    threading.Thread(target=watch, name="kiln-compactor-parent", daemon=True).start()


def compact_prefix(journal: Path, upto: int, out: Path) -> int | None:
    """Write to `out` (synced) the state the first `upto` bytes of `journal` lead to; the
    number of records written, or None if that state holds services the dump skips."""
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

    from kiln.local.emulator import compaction, motofix
    from kiln.local.emulator.fastpath import FastItems
    from kiln.local.emulator.sigv4 import Credentials

    motofix.install()
    records, _ = read_records(journal, upto)
    target = Journal(out, valid_length=0, sync=False)
    try:
        app = FastItems(DomainDispatcherApplication(create_backend_app))  # as the emulator
        replica = DurableEmulator(app, target, Credentials("unused", "unused"))
        compaction.replay(replica, records)
        if replica.foreign_writes:
            return None
        target.replace_with(compaction.dump(replica, time.time()))
        return target.records
    finally:
        target.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kiln.local.emulator.compactor")
    parser.add_argument("--journal", required=True, type=Path)
    parser.add_argument("--upto", required=True, type=int)
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args(argv)
    os.umask(PRIVATE_UMASK)
    not_dumpable()  # it holds the whole catalog in memory too
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    _exit_with_parent(args.out)
    written = compact_prefix(args.journal, args.upto, args.out)
    if written is None:
        _remove(args.out)
        return NOT_COMPACTABLE
    print(json.dumps({"records": written}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
