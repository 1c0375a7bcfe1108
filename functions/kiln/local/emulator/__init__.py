"""Kiln's local AWS emulator: moto in a child process, signed requests only, durable state.

`kiln dev` runs it with `run_emulator(state_dir)`; `kiln stdio` beside it finds it with
`shared_endpoint(state_dir)`. The parts: sigv4 (signature checks), journal + durable (the
write-ahead journal in front of moto), compaction (and compactor, which runs it in a child
process while the emulator serves), motofix (moto's table copies), server (the child
process), privacy (the state directory's permissions).
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from kiln.local.emulator.changes import CHANGES_FILE
from kiln.local.emulator.sigv4 import Credentials
from kiln.settings import emulator_environment

REGION = "us-east-1"


@dataclass(frozen=True)
class Endpoint:
    url: str
    credentials: Credentials
    region: str = REGION
    changes: Path | None = None  # the emulator's write counter (see changes.py)


class EmulatorError(RuntimeError):
    """The emulator could not be started."""


def _read_credentials(state_dir: Path) -> Credentials:
    data = json.loads((state_dir / "credentials.json").read_text("utf-8"))
    return Credentials(data["access_key_id"], data["secret_access_key"])


def shared_endpoint(state_dir: Path) -> Endpoint | None:
    """The running emulator of `state_dir`, as its files describe it (None if none is)."""
    try:
        url = json.loads((state_dir / "endpoint.json").read_text("utf-8"))["url"]
        return Endpoint(url, _read_credentials(state_dir), changes=state_dir / CHANGES_FILE)
    except (FileNotFoundError, KeyError, ValueError):
        return None


@contextmanager
def run_emulator(
    state_dir: Path,
    *,
    start_timeout_s: float = 60.0,
    compact_after: int | None = None,
    call_log: Path | None = None,
    partition_limits: str | None = None,
    partition_window_s: float | None = None,
    throughput_log: Path | None = None,
    fast_items: bool = True,
) -> Iterator[Endpoint]:
    """Start the emulator for `state_dir` as a child process; stop it when the block ends.

    The child has its own session (a Ctrl-C meant for `kiln dev` does not stop it while
    `kiln dev` still shuts down) and exits when its stdin closes: when this process
    exits, even by SIGKILL, the kernel closes the pipe and the emulator follows.
    """
    command = [sys.executable, "-m", "kiln.local.emulator", "--state-dir", str(state_dir)]
    if compact_after is not None:
        command += ["--compact-after", str(compact_after)]
    if call_log is not None:
        command += ["--call-log", str(call_log)]
    if partition_limits is not None:
        command += ["--partition-limits", partition_limits]
    if partition_window_s is not None:
        command += ["--partition-window", str(partition_window_s)]
    if throughput_log is not None:
        command += ["--throughput-log", str(throughput_log)]
    if not fast_items:  # every request through moto's web app (tests compare the two)
        command += ["--no-fast-items"]
    process = subprocess.Popen(
        command,
        env=emulator_environment(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        assert process.stdout is not None
        fd = process.stdout.fileno()
        deadline = time.monotonic() + start_timeout_s
        line = b""
        while not line.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or process.poll() is not None:
                raise EmulatorError(f"the local emulator did not start (state in {state_dir})")
            ready, _, _ = select.select([fd], [], [], min(left, 0.5))
            if ready:
                chunk = os.read(fd, 4096)
                if not chunk:
                    continue
                line += chunk
        url = json.loads(line)["url"]
        yield Endpoint(url, _read_credentials(state_dir), changes=state_dir / CHANGES_FILE)
    finally:
        _stop(process)


def _stop(process: subprocess.Popen[bytes]) -> None:
    for stream in (process.stdin, process.stdout):
        if stream is not None:
            stream.close()  # stdin's end of file is the emulator's signal to exit
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
