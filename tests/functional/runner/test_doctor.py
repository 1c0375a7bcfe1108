"""`kiln doctor` says what this machine enforces, each item tried for real."""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import kiln
from kiln.runner import contain, landlock

FUNCTIONS = Path(kiln.__file__).resolve().parents[1]
LSM = "/sys/kernel/security/lsm"


def doctor(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kiln.cli", "doctor", *args],
        env={"PYTHONPATH": str(FUNCTIONS), "PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def seccomp_in_a_child() -> bool:
    """Installing a seccomp filter here, tried directly (not through kiln.runner.doctor)."""
    pid = os.fork()
    if pid == 0:
        try:
            contain.mark_as_run()
        except OSError:
            os._exit(1)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) == 0


def test_doctor_json_matches_the_kernel() -> None:
    completed = doctor("--json")
    assert completed.returncode == 0, completed.stderr
    found = json.loads(completed.stdout)
    assert found["kernel"] == os.uname().release
    assert found["landlock_abi"] == landlock.abi()
    lsm = Path("/sys/kernel/security/lsm")
    if lsm.exists():
        assert found["lsm"] == lsm.read_text().strip()
        assert ("landlock" in found["lsm"].split(",")) == (found["landlock_abi"] > 0)
    assert (found["seccomp"] == "allowed") == seccomp_in_a_child()
    assert found["runs"]["mark"] == ("seccomp" if seccomp_in_a_child() else "none")
    expected = "a uid per run" if contain.can_switch_uid() else "one uid for every run"
    assert found["uid_model"] == expected
    assert ctypes.sizeof(ctypes.c_int) == 4  # (the probe's ctypes calls assume it)


def test_doctor_reads_the_lsm_list_as_the_kernel_gives_it() -> None:
    """Where securityfs is not mounted (as here), in a mount namespace of its own with it."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("needs root and unshare to mount securityfs privately")
    script = (
        "mount -t securityfs securityfs /sys/kernel/security 2>/dev/null; "
        f"cat {LSM}; echo; echo ---; exec {sys.executable} -m kiln.cli doctor --json"
    )
    done = subprocess.run(
        ["unshare", "--mount", "sh", "-c", script], capture_output=True, text=True, timeout=60,
        check=False,
        env={"PYTHONPATH": str(FUNCTIONS), "PATH": os.environ.get("PATH", "/usr/bin:/bin")},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    listed, _, report = done.stdout.partition("---\n")
    found = json.loads(report)
    if not listed.strip():
        pytest.skip("this kernel has no securityfs to mount")
    assert found["lsm"] == listed.strip()
    assert ("landlock" in listed.strip().split(",")) == (found["landlock_abi"] > 0), found


def test_doctor_text_names_the_isolation_and_require_fails_when_weaker() -> None:
    completed = doctor()
    assert completed.returncode == 0, completed.stderr
    assert "each run gets isolation=" in completed.stdout
    stronger = doctor("--require", "mounts")
    got = json.loads(doctor("--json").stdout)["runs"]["isolation"]
    if got == "mounts":
        assert stronger.returncode == 0
    else:
        assert stronger.returncode == 1
        assert f"runs get {got!r}, weaker than the claimed 'mounts'" in stronger.stderr


def test_doctor_aws_without_a_function_says_what_is_missing() -> None:
    completed = doctor("--aws")
    assert completed.returncode == 2
    assert "KILN_RUNNER_FUNCTION" in completed.stderr
