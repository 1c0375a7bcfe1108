"""The emulator process: moto behind signature checks and a write-ahead journal.

Started by `kiln dev` (or a test) as `python -m kiln.local.emulator --state-dir DIR`. It owns DIR
(a file lock: a second emulator waits for the first to be gone), replays DIR/journal into
a fresh moto, listens on a loopback port, writes DIR/endpoint.json and prints one JSON
line with the URL on stdout. It exits when its stdin reaches end of file, that is when the
process that started it is gone, however it died.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import logging
import os
import secrets
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

from kiln.local.emulator import compaction, motofix
from kiln.local.emulator.calllog import CallLog
from kiln.local.emulator.changes import ChangeCounter
from kiln.local.emulator.compactor import BackgroundCompactor, remove_leftovers
from kiln.local.emulator.durable import DurableEmulator
from kiln.local.emulator.fastpath import FastItems
from kiln.local.emulator.journal import Journal, read_records
from kiln.local.emulator.privacy import PRIVATE_UMASK, not_dumpable, secure_tree, write_private
from kiln.local.emulator.sigv4 import Credentials
from kiln.local.emulator.throughput import PartitionLimits, parse_limits

log = logging.getLogger("kiln.local.emulator")
CREDENTIALS_FILE = "credentials.json"
ENDPOINT_FILE = "endpoint.json"
JOURNAL_FILE = "journal"
LOCK_FILE = "emulator.lock"


def load_credentials(state_dir: Path) -> Credentials:
    """This state directory's key pair, made on first use and kept in a 0600 file."""
    path = state_dir / CREDENTIALS_FILE
    if not path.is_file():
        fresh = {
            "access_key_id": "KILN" + secrets.token_hex(8).upper(),
            "secret_access_key": secrets.token_urlsafe(30),
        }
        write_private(path, json.dumps(fresh).encode())
    data = json.loads(path.read_text("utf-8"))
    return Credentials(data["access_key_id"], data["secret_access_key"])


def _lock(state_dir: Path, wait_s: float) -> IO[str]:
    """Hold the state directory; a previous emulator that is still exiting is waited for."""
    handle = (state_dir / LOCK_FILE).open("a")
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return handle
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise SystemExit(
                    f"kiln emulator: {state_dir} is in use by another emulator"
                ) from None
            time.sleep(0.05)


def _exit_with_parent(stream: Any, endpoint_file: Path) -> None:
    def watch() -> None:
        while stream.read(65536):
            pass
        endpoint_file.unlink(missing_ok=True)
        os._exit(0)  # every acknowledged write is already on disk: nothing to flush

    threading.Thread(target=watch, name="kiln-emulator-parent", daemon=True).start()


def build(
    state_dir: Path, *, sync: bool = True, compact_after: int = 5000, fast_items: bool = True
) -> DurableEmulator:
    """The emulator's WSGI app with the journal replayed (compacted if it grew long)."""
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

    motofix.install()
    credentials = load_credentials(state_dir)
    remove_leftovers(state_dir)
    records, valid = read_records(state_dir / JOURNAL_FILE)
    journal = Journal(state_dir / JOURNAL_FILE, valid_length=valid, sync=sync)
    journal.records = len(records)
    # item requests skip moto's web app (fastpath); everything else goes through it
    dispatcher = DomainDispatcherApplication(create_backend_app)
    app = FastItems(dispatcher) if fast_items else dispatcher
    emulator = DurableEmulator(app, journal, credentials)
    emulator.dispatcher = dispatcher
    compaction.replay(emulator, records)
    # At start no one is waiting yet: a long journal is compacted here, in this process.
    if len(records) > compact_after // 5 and not emulator.foreign_writes:
        journal.replace_with(compaction.dump(emulator, time.time()))
    emulator.after_append = BackgroundCompactor(emulator, compact_after).after_append
    return emulator


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kiln.local.emulator")
    parser.add_argument("--state-dir", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--compact-after", type=int, default=5000)
    parser.add_argument("--lock-wait", type=float, default=15.0)
    parser.add_argument("--no-parent-watch", action="store_true")
    parser.add_argument("--call-log", help="append one JSON line per request to this file")
    parser.add_argument(
        "--partition-limits",
        help="DynamoDB's per-partition limits, READS/WRITES units a second (e.g. 3000/1000)",
    )
    parser.add_argument("--partition-window", type=float, default=1.0,
                        help="seconds over which the partition limits are counted")  # fmt: skip
    parser.add_argument("--throughput-log", help="append refusals and busiest partitions here")
    parser.add_argument("--no-fast-items", action="store_true",
                        help="answer item requests through moto's web app too (tests)")  # fmt: skip
    args = parser.parse_args(argv)

    from werkzeug.serving import make_server

    from kiln.local.emulator.keepalive import KeepAliveHandler

    os.umask(PRIVATE_UMASK)
    not_dumpable()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    state_dir = Path(args.state_dir)
    secure_tree(state_dir)
    lock = _lock(state_dir, args.lock_wait)
    if not args.no_parent_watch:
        _exit_with_parent(sys.stdin.buffer, state_dir / ENDPOINT_FILE)
    emulator = build(state_dir, compact_after=args.compact_after,
                     fast_items=not args.no_fast_items)  # fmt: skip
    emulator.changes = ChangeCounter(state_dir)  # after the replay: readers start afresh
    if args.call_log:
        emulator.call_log = CallLog(Path(args.call_log))
    if args.partition_limits:
        log_path = Path(args.throughput_log) if args.throughput_log else None
        emulator.limits = PartitionLimits(
            *parse_limits(args.partition_limits), window_s=args.partition_window, log=log_path
        )

    # keep-alive (werkzeug's own handler closes every connection): botocore reuses them
    server = make_server(
        args.host, args.port, emulator, threaded=True, request_handler=KeepAliveHandler
    )
    url = f"http://{args.host}:{server.server_address[1]}"
    write_private(state_dir / ENDPOINT_FILE, json.dumps({"url": url, "pid": os.getpid()}).encode())
    print(json.dumps({"url": url}), flush=True)
    try:
        server.serve_forever()
    finally:
        (state_dir / ENDPOINT_FILE).unlink(missing_ok=True)
        emulator.journal.close()
        lock.close()
    return 0
