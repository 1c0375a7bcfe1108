"""The hostile-tool tests' snoop holds up on a machine whose disks are full of readable files.

With gigabytes of readable files in /tmp the snoop once kept every file it read in memory,
hit its memory limit, and the hostile-tool tests failed with a bare JSONDecodeError.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.hostile_driver import SNOOP

SYSTEM_PYTHON = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable

MEMORY_LIMIT = 256 << 20
NOBODY = 65534


def limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


@pytest.fixture
def world_readable() -> Iterator[tuple[Path, Path]]:
    """Two directories another uid can walk (pytest's own are private to this one): the
    runs' root, and a heap of unrelated files as /tmp may hold."""
    tops = [Path(tempfile.mkdtemp(prefix="kiln-snoop-")) for _ in range(2)]
    for top in tops:
        top.chmod(0o755)
    try:
        yield tops[0], tops[1]
    finally:
        for top in tops:
            shutil.rmtree(top, ignore_errors=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="runs the snoop as another uid (nobody): needs root")
def test_the_snoop_reports_within_its_memory_limit_whatever_else_is_on_disk(
    world_readable: tuple[Path, Path],
) -> None:
    runs, heap = world_readable
    for index in range(400):  # 400 MB of readable (sparse) files, more than its limit
        with (heap / f"big-{index}").open("wb") as big:
            big.truncate(1 << 20)
        (heap / f"big-{index}").chmod(0o644)
    (runs / "victim").mkdir(mode=0o755)
    (runs / "victim" / "planted").write_text("needle-7f3a")
    (runs / "victim" / "planted").chmod(0o644)
    (runs / "own").mkdir(mode=0o755)
    shared = runs / "shared"
    shared.mkdir(mode=0o755)
    args = {"wait_for_victim": False, "needles": ["needle-7f3a", "absent-9c"],
            "work_root": str(heap)}  # fmt: skip
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "SHARED_DIR": str(shared)}
    done = subprocess.run(
        [SYSTEM_PYTHON, "-c", SNOOP], input=json.dumps(args), env=env, cwd=runs / "own",
        capture_output=True, text=True, timeout=120, check=False, preexec_fn=limit_memory,
        user=NOBODY, group=NOBODY,  # as a tool runs: other processes' memory is not readable
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout)["found"] == ["needle-7f3a"]
