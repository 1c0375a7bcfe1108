"""Deadlines and the process tree: nothing a script starts outlives its call."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import kiln
from kiln.runner import contract_text, landlock
from support.runner import Harness, is_alive, wait_for
from support.runner import harness_fixture as harness_fixture

# A script that starts a helper, waits until the helper has written its pid, then exits 0.
DOUBLE_FORK = """
import os, sys, time
shared = os.environ["SHARED_DIR"]
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        with open(os.path.join(shared, "daemon.pid.tmp"), "w") as f:
            f.write(str(os.getpid()))
        os.rename(os.path.join(shared, "daemon.pid.tmp"), os.path.join(shared, "daemon.pid"))
        os.closerange(0, 3)
        time.sleep(300)
    os._exit(0)
while not os.path.exists(os.path.join(shared, "daemon.pid")):
    time.sleep(0.01)
print("daemon started")
"""

SETSID_ESCAPE = """
import os, subprocess, sys
p = subprocess.Popen(["sleep", "300"], start_new_session=True,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
with open(os.path.join(os.environ["SHARED_DIR"], "escape.pid"), "w") as f:
    f.write(str(p.pid))
print("escaped")
"""

# 2**7 = 128 processes, each sleeping; the main one exits once they all exist.
FORK_BOMB = """
import os, time
shared = os.environ["SHARED_DIR"]
main = os.getpid()
for _ in range(7):
    os.fork()
open(os.path.join(shared, f"bomb.{os.getpid()}"), "w").close()
if os.getpid() == main:
    while len(os.listdir(shared)) < 128:
        time.sleep(0.01)
    print("bomb ready")
else:
    time.sleep(300)
"""


def read_pid(path: Path) -> int:
    return int(path.read_text())


def test_infinite_loop_is_killed_at_the_tools_limit(harness: Harness) -> None:
    result = harness.run("while True:\n    pass\n", timeout_s=0.5)
    assert result.timed_out
    assert result.exit_code is None
    assert result.failed
    assert contract_text(result) == "(no output)\n[timeout] killed after 0.50 s (the tool's limit)"
    assert 0.5 <= result.duration_s < 10.0  # stopped, not left to run on
    harness.assert_clean()


def test_sleep_past_the_deadline_keeps_output_printed_before_it(harness: Harness) -> None:
    code = "import time\nprint('working', flush=True)\ntime.sleep(60)\n"
    result = harness.run(code, timeout_s=0.5)
    assert contract_text(result) == "working\n[timeout] killed after 0.50 s (the tool's limit)"
    harness.assert_clean()


def test_node_sleep_past_the_deadline_is_killed(harness: Harness) -> None:
    code = "setTimeout(() => console.log('late'), 60000);\n"
    result = harness.run(code, language="node", timeout_s=0.5)
    assert result.timed_out
    assert "late" not in result.stdout
    harness.assert_clean()


def test_double_forked_daemon_is_killed_when_the_script_exits(harness: Harness) -> None:
    result = harness.run(DOUBLE_FORK)
    assert contract_text(result) == "daemon started"
    daemon = read_pid(harness.shared / "daemon.pid")
    assert not is_alive(daemon)
    harness.assert_clean()


def test_double_forked_daemon_is_killed_at_the_deadline(harness: Harness) -> None:
    result = harness.run(DOUBLE_FORK + "import time\ntime.sleep(60)\n", timeout_s=1.0)
    assert result.timed_out
    assert not is_alive(read_pid(harness.shared / "daemon.pid"))
    harness.assert_clean()


def test_setsid_escape_is_killed(harness: Harness) -> None:
    result = harness.run(SETSID_ESCAPE)
    assert contract_text(result) == "escaped"
    assert not is_alive(read_pid(harness.shared / "escape.pid"))
    harness.assert_clean()


def test_node_detached_child_is_killed(harness: Harness) -> None:
    code = """
const { spawn } = require('node:child_process');
const fs = require('node:fs');
const child = spawn('sleep', ['300'], { detached: true, stdio: 'ignore' });
child.unref();
fs.writeFileSync(process.env.SHARED_DIR + '/node-child.pid', String(child.pid));
console.log('detached');
"""
    result = harness.run(code, language="node")
    assert contract_text(result) == "detached"
    assert not is_alive(read_pid(harness.shared / "node-child.pid"))
    harness.assert_clean()


def test_bounded_fork_bomb_is_cleaned_up_after_the_script_exits(harness: Harness) -> None:
    result = harness.with_settings(max_processes=256).run(FORK_BOMB)
    assert contract_text(result) == "bomb ready"
    pids = [int(p.name.split(".")[1]) for p in harness.shared.glob("bomb.*")]
    assert len(pids) == 128
    assert [pid for pid in pids if is_alive(pid)] == []
    harness.assert_clean()


def test_bounded_fork_bomb_is_cleaned_up_at_the_deadline(harness: Harness) -> None:
    roomy = harness.with_settings(max_processes=256)
    result = roomy.run(FORK_BOMB.replace('print("bomb ready")', "time.sleep(300)"), timeout_s=2.0)
    assert result.timed_out
    pids = [int(p.name.split(".")[1]) for p in harness.shared.glob("bomb.*")]
    assert len(pids) == 128
    assert [pid for pid in pids if is_alive(pid)] == []
    harness.assert_clean()


def test_cancelled_run_kills_its_tree_and_removes_its_directory(harness: Harness) -> None:
    async def cancel_midway() -> None:
        task = asyncio.create_task(
            harness.runner.run(harness.request(DOUBLE_FORK + "import time\ntime.sleep(60)\n"))
        )
        await asyncio.to_thread(wait_for, lambda: (harness.shared / "daemon.pid").exists())
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancel_midway())
    assert not is_alive(read_pid(harness.shared / "daemon.pid"))
    harness.assert_clean()


def test_marker_scan_sees_a_live_run(harness: Harness) -> None:
    """The cleanliness check itself can fail: a running script's processes are found."""

    async def look_while_running() -> list[int]:
        task = asyncio.create_task(
            harness.runner.run(
                harness.request(DOUBLE_FORK + "import time\ntime.sleep(60)\n", timeout_s=5)
            )
        )
        await asyncio.to_thread(wait_for, lambda: (harness.shared / "daemon.pid").exists())
        seen = harness.leftovers()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        return seen

    seen = asyncio.run(look_while_running())
    assert read_pid(harness.shared / "daemon.pid") in seen
    harness.assert_clean()


def test_script_that_kills_its_supervisor_gets_a_runner_error_and_its_daemon_dies(
    harness: Harness,
) -> None:
    """Where runs share the server's uid with no fence (Lambda), a script can kill its
    supervisor."""
    shared_uid = harness.with_settings(run_uids=None, landlock=False)
    code = DOUBLE_FORK + "import signal\nos.kill(os.getppid(), signal.SIGKILL)\ntime.sleep(60)\n"
    result = shared_uid.run(code, timeout_s=5)
    assert result.runner_error == "the run's supervisor ended without reporting (was it killed?)"
    assert result.exit_code is None
    assert result.isolation == "shared"  # no fence, and it says so
    assert contract_text(result).endswith(
        "[runner error] the run's supervisor ended without reporting (was it killed?)"
    )
    # The script dies with its supervisor (PDEATHSIG); the helper, a subreaper too, kills the rest.
    wait_for(lambda: not is_alive(read_pid(harness.shared / "daemon.pid")))
    harness.assert_clean()


@pytest.mark.skipif(landlock.abi() < 6, reason="signal scoping needs Landlock ABI 6")
def test_a_fenced_script_under_the_servers_uid_cannot_signal_its_supervisor(
    harness: Harness,
) -> None:
    shared_uid = harness.with_settings(run_uids=None)
    code = DOUBLE_FORK + (
        "import signal\n"
        "for sig in (signal.SIGSTOP, signal.SIGKILL):\n"
        "    try:\n"
        "        os.kill(os.getppid(), sig)\n"
        "    except PermissionError:\n"
        "        print('refused', sig.name)\n"
    )
    result = shared_uid.run(code, timeout_s=5)
    assert result.stdout == "daemon started\nrefused SIGSTOP\nrefused SIGKILL\n"
    assert result.runner_error is None
    assert result.exit_code == 0
    assert result.isolation == "landlock"
    wait_for(lambda: not is_alive(read_pid(harness.shared / "daemon.pid")))
    harness.assert_clean()


def test_a_dead_helper_is_replaced_on_the_next_run(harness: Harness) -> None:
    harness.run("print('first')")
    helper = harness.runner.helper_pid
    assert helper is not None
    os.kill(helper, signal.SIGKILL)
    wait_for(lambda: not is_alive(helper))  # (a standby asked of a dying helper is not made)
    assert harness.text("print('second')") == "second"
    assert harness.runner.helper_pid != helper
    harness.assert_clean()


NON_ROOT_RUN = """
import asyncio, sys
from pathlib import Path
from kiln.runner import Runner, RunnerSettings, RunRequest, contract_text
code = '''
import os, time
n = 0
try:
    for _ in range(200):
        if os.fork() == 0:
            time.sleep(30)
            os._exit(0)
        n += 1
except OSError as e:
    print("fork refused after", n, type(e).__name__)
'''
async def main():
    settings = RunnerSettings(
        work_root=Path(sys.argv[1]), max_processes=20, python_executable=Path(sys.executable)
    )
    runner = Runner(settings)
    result = await runner.run(RunRequest(language="python", code=code, arguments={}, timeout_s=20))
    print(contract_text(result))
    runner.close()
asyncio.run(main())
"""


def nobody_can_run(python: str) -> bool:
    probe = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", python, "-c", "pass"]
    try:
        return subprocess.run(probe, capture_output=True, check=False).returncode == 0
    except FileNotFoundError:
        return False


def test_as_a_non_root_user_max_processes_stops_a_fork_bomb(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to drop to an unprivileged user for the run")
    python = next((p for p in ("/usr/bin/python3", sys.executable) if nobody_can_run(p)), None)
    if python is None:
        pytest.skip("no Python interpreter that user 65534 may run")
    work_root = Path(tempfile.mkdtemp(prefix="kiln-nonroot-"))
    try:
        work_root.chmod(0o777)
        functions = Path(kiln.__file__).resolve().parents[1]
        completed = subprocess.run(
            [
                *("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"),
                python,
                "-c",
                NON_ROOT_RUN,
                str(work_root),
            ],
            env={"PYTHONPATH": str(functions), "PATH": "/usr/bin:/bin"},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert completed.stdout == "fork refused after 20 BlockingIOError\n", completed.stderr
        assert list(work_root.iterdir()) == []
    finally:
        shutil.rmtree(work_root, ignore_errors=True)


def test_cancelling_at_any_point_of_a_run_leaves_nothing_behind(harness: Harness) -> None:
    code = DOUBLE_FORK + "import time\ntime.sleep(60)\n"

    async def cancel_after(spins: int) -> None:
        task = asyncio.create_task(harness.runner.run(harness.request(code)))
        for _ in range(spins):
            await asyncio.sleep(0)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    async def every_point() -> None:
        for spins in range(12):
            await cancel_after(spins)
        await cancel_after(200)

    asyncio.run(every_point())
    harness.assert_clean()


def test_a_frozen_supervisor_is_overruled_by_the_servers_own_timer(harness: Harness) -> None:
    """The supervisor enforces the deadline; if it cannot, the server kills the tree itself."""
    # Unfenced under the server's uid, a script may stop its supervisor.
    strict = harness.with_settings(kill_grace_s=0.5, run_uids=None, landlock=False)
    code = DOUBLE_FORK + "import signal\nos.kill(os.getppid(), signal.SIGSTOP)\ntime.sleep(60)\n"
    result = strict.run(code, timeout_s=0.5)
    assert result.timed_out
    assert contract_text(result).endswith("[timeout] killed after 0.50 s (the tool's limit)")
    assert 1.0 <= result.duration_s < 5.0  # deadline + grace for the timer, + grace for SIGTERM
    wait_for(lambda: not is_alive(read_pid(harness.shared / "daemon.pid")))
    harness.assert_clean()
