"""tests/run's apt step with another program holding apt's lock: it waits, then goes on."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

STEP = Path(__file__).resolve().parents[2] / "apt_step"


@contextmanager
def held(lock: Path, how: str) -> Iterator[subprocess.Popen[bytes]]:
    """Another process holding `lock` as apt does (fcntl) or as `flock(1)` does."""
    take = "fcntl.lockf(f, fcntl.LOCK_EX)" if how == "fcntl" else "fcntl.flock(f, fcntl.LOCK_EX)"
    holder = subprocess.Popen(
        ["python3", "-c", f"import fcntl, sys, time\nf = open({str(lock)!r}, 'w')\n{take}\n"
         "print('held', flush=True)\ntime.sleep(60)"],
        stdout=subprocess.PIPE,
    )  # fmt: skip
    assert holder.stdout is not None
    try:
        assert holder.stdout.readline() == b"held\n"
        yield holder
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()


def start_step(tmp_path: Path, lock: Path, wait_s: int) -> subprocess.Popen[str]:
    fake = tmp_path / "apt-get"
    fake.write_text(f'#!/bin/sh\necho "$@" >> {tmp_path / "apt-calls"}\n')
    fake.chmod(0o755)
    env = {**os.environ, "KILN_CHROMIUM": str(tmp_path / "no-chromium"),
           "KILN_APT_GET": str(fake), "KILN_APT_LOCKS": str(lock),
           "KILN_APT_WAIT": str(wait_s)}  # fmt: skip
    return subprocess.Popen([str(STEP)], env=env, stderr=subprocess.PIPE, text=True)


def apt_calls(tmp_path: Path) -> str:
    calls = tmp_path / "apt-calls"
    return calls.read_text() if calls.exists() else ""


@pytest.mark.parametrize("how", ["fcntl", "flock"])
def test_a_held_apt_lock_is_waited_for_then_stepped_around_without_failing(
    tmp_path: Path, how: str
) -> None:
    lock = tmp_path / "lock-frontend"
    lock.touch()
    with held(lock, how):
        step = start_step(tmp_path, lock, wait_s=1)
        _, stderr = step.communicate(timeout=60)
    assert step.returncode == 0, stderr
    assert "another program holds apt's lock; waiting up to 1 s" in stderr
    assert "going on without chromium" in stderr
    assert apt_calls(tmp_path) == ""  # apt-get was never run against the held lock


def test_a_lock_released_while_waiting_lets_the_install_go_ahead(tmp_path: Path) -> None:
    lock = tmp_path / "lock-frontend"
    lock.touch()
    with held(lock, "fcntl"):
        step = start_step(tmp_path, lock, wait_s=60)
        assert step.stderr is not None
        assert "waiting up to 60 s" in step.stderr.readline()  # it saw the lock held
    _, rest = step.communicate(timeout=60)  # released: the install goes ahead
    assert step.returncode == 0, rest
    assert "update -q" in apt_calls(tmp_path)
    assert "install -y -q chromium" in apt_calls(tmp_path)
