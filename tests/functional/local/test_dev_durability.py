"""`kill -9` of a real `kiln dev` right after a write is acknowledged loses nothing.

The full 20-round run is bench/durability/kill9.py; the suite runs a few rounds.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from support.devserver import start_dev

ROUNDS = 3


@pytest.mark.slow
def test_writes_acknowledged_just_before_a_sigkill_are_all_there_after_a_restart(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    acknowledged: dict[str, int] = {}
    for round_number in range(ROUNDS):
        dev = start_dev(state)
        try:
            for name, revision in acknowledged.items():
                got = dev.api("GET", f"/api/tools/{name}")
                assert got.status_code == 200, f"round {round_number}: {name} lost"
                assert got.json()["revision"] == revision
            name = f"tool_{round_number}"
            tool = {"name": name, "description": "d", "language": "python", "code": "print(1)"}
            assert dev.api("POST", "/api/tools", json=tool).status_code == 201
            acknowledged[name] = 1
            if round_number:
                previous = f"tool_{round_number - 1}"
                edited = {**tool, "name": previous, "description": f"round {round_number}"}
                put = dev.api(
                    "PUT", f"/api/tools/{previous}", json=edited, headers={"If-Match": '"1"'}
                )
                assert put.status_code == 200, put.text
                acknowledged[previous] = 2
            emulator = dev.emulator_pid()
        finally:
            dev.process.kill()  # SIGKILL, right after the last acknowledgement
            dev.process.wait()
        deadline = time.monotonic() + 10
        while emulator is not None and Path(f"/proc/{emulator}/cmdline").exists():
            if not Path(f"/proc/{emulator}/cmdline").read_bytes():
                break  # a zombie until its reaper notices: already dead
            assert time.monotonic() < deadline, "the emulator outlived kiln dev"
            time.sleep(0.05)
    dev = start_dev(state)
    try:
        listed = {t["name"]: t["revision"] for t in dev.api("GET", "/api/tools").json()["tools"]}
    finally:
        dev.process.kill()
        dev.process.wait()
    assert listed == acknowledged
