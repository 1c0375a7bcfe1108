"""A hostile `execute` (code mode, issue 38) is contained like any tool: model-written code is
hostile input.

`kiln dev` as a real process in each uid model (`support.devserver.kiln_dev_as`: as root,
each run its own uid; as an unprivileged user, one uid for the server and every run, fenced
by Landlock; the same unfenced, as on Lambda), a code-mode view, and `execute` doing what the
hostile-tool tests' scripts do (`test_hostile_tools.py`, `test_runner_process_tree.py`, whose
snoop it reuses): a fork bomb, reading every process's environ, cmdline and memory and every
file under /tmp for the server's secrets and another run's, a double-forked daemon, and a loop
of calls (the count bound ends it). Recursion through calls (execute → ping → pong → …, and
a raw talk line calling `execute` itself) is in `functional/local/test_inner_calls_on_dev.py`.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from functional.local.test_inner_calls_on_dev import text, write_inner_tools
from support.devserver import DevServer, kiln_dev_as, unprivileged_user
from support.hostile_driver import SNOOP
from support.runner import wait_for

MODELS = ["root", "unprivileged", "unfenced"]


@dataclass
class Hosted:
    model: str
    dev: DevServer
    env_secret: str  # in the server's environment
    tmp_secret: str  # in a file of the server's in /tmp, readable by its uid only


@pytest.fixture(scope="module", params=MODELS)
def hosted(request: pytest.FixtureRequest) -> Iterator[Hosted]:
    if os.geteuid() != 0:
        pytest.skip("needs root: to run kiln dev both as root and as another user")
    model = str(request.param)
    base = Path(tempfile.mkdtemp(prefix="kiln-hostile-execute-"))
    secret_file = Path(f"/tmp/kiln-execute-secret-{secrets.token_hex(6)}")
    try:
        write_inner_tools(base / "tools")
        env_secret = "server-env-" + secrets.token_hex(12)
        tmp_secret = "server-tmp-" + secrets.token_hex(12)
        secret_file.write_text(tmp_secret)
        secret_file.chmod(0o600)
        if model != "root":
            uid, gid = unprivileged_user()
            os.chown(secret_file, uid, gid)
        env = {"HOSTILE_SERVER_SECRET": env_secret}
        tools = str(base / "tools")
        with kiln_dev_as(model, base, "--no-examples", "--tools", tools, env=env) as dev:
            yield Hosted(model, dev, env_secret, tmp_secret)
    finally:
        with contextlib.suppress(FileNotFoundError):
            secret_file.unlink()
        shutil.rmtree(base, ignore_errors=True)


def execute(hosted: Hosted, code: str) -> dict[str, Any]:
    params = {"name": "execute", "arguments": {"code": code}}
    response = hosted.dev.mcp("tools/call", params, wire="modern", path="/mcp/v/coder")
    assert response.status_code == 200, f"{response.text}\n--- log:\n{log_tail(hosted)}"
    body = response.json()
    assert "result" in body, f"{body}\n--- log:\n{log_tail(hosted)}"
    return dict(body["result"])


def log_tail(hosted: Hosted) -> str:
    log = hosted.dev.log
    return log.read_text(errors="replace")[-3000:] if log else "(no log)"


def with_stdin(code: str, arguments: dict[str, Any], **environ: str) -> str:
    """`code`, a script that reads its arguments from stdin, as execute's code (whose stdin
    the wrapper has read): its arguments and environment given first."""
    preface = (
        "import io, json, os, sys\n"
        f"sys.stdin = io.StringIO({json.dumps(arguments)!r})\n"
        f"os.environ.update({environ!r})\n"
    )
    return preface + code


def running_with(marker: str) -> list[int]:
    """Processes anywhere on the machine whose command line holds `marker`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError):
            if marker.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                found.append(int(entry))
    return found


def test_execute_cannot_read_the_servers_secrets_or_another_runs(hosted: Hosted) -> None:
    other = "other-run-" + secrets.token_hex(12)
    plant = (
        f"open('planted.txt', 'w').write({other!r})\n"
        "try:\n"
        f"    open('/tmp/kiln-planted-' + {other[-8:]!r}, 'w').write({other!r})\n"
        "except OSError:\n"
        "    pass\n"
        "print('planted')\n"
    )
    assert text(execute(hosted, plant)).strip() == "planted"
    own = "snoop-own-" + secrets.token_hex(12)
    needles = [hosted.env_secret, hosted.tmp_secret, other, own]
    arguments = {"needles": needles, "wait_for_victim": False, "work_root": "/tmp"}
    code = with_stdin(SNOOP, arguments, SHARED_DIR="/nonexistent", SNOOP_OWN=own)
    result = execute(hosted, code)
    try:
        snoop = json.loads(text(result))
    except ValueError:
        raise AssertionError(f"the snoop printed no report: {result}") from None
    assert snoop["opened"].get("cmdline", 0) > 1, snoop  # it really looked at other processes
    if hosted.model == "unfenced":
        # The runner README's known limits: one uid and no fence (old kernels; Lambda, whose
        # runs go to the runner function) reads what the server's uid can read, /tmp's files
        # of the server and of other runs among them. Never the server's environment.
        assert hosted.env_secret not in snoop["found"], snoop
        assert own in snoop["found"], snoop
        # What the first run left in /tmp stays there too (nothing tells it apart): gone here.
        Path(f"/tmp/kiln-planted-{other[-8:]}").unlink(missing_ok=True)
        return
    assert snoop["found"] == [own], snoop  # its own; nothing of the server's or a run's
    planted = Path(f"/tmp/kiln-planted-{other[-8:]}")  # refused when fenced, else removed
    try:
        wait_for(lambda: not planted.exists(), timeout_s=10)
    except AssertionError:
        pytest.fail(f"the first run's /tmp file outlived it: {planted}")


# Counts the processes whose command line holds `marker`, as the run sees them.
SEEN = """\
def seen(marker):
    found = 0
    for entry in os.listdir("/proc"):
        try:
            found += entry.isdigit() and marker in open(f"/proc/{entry}/cmdline", "rb").read()
        except OSError:
            pass
    return found
def await_seen(marker, n):
    give_up = time.time() + 10
    while seen(marker) < n and time.time() < give_up:
        time.sleep(0.02)
    return seen(marker)
"""
FORK_BOMB = (
    "import os, sys, time\n"
    + SEEN
    + """\
n = 0
try:
    for _ in range(4000):
        if os.fork() == 0:
            os.execvp("sleep", ["sleep", "MARKER"])
        n += 1
except OSError as error:
    said = f"fork refused after {n} {type(error).__name__}"
else:
    said = f"forked {n}"
print(said, "running", await_seen(b"MARKER", n))
"""
)


def test_an_execute_fork_bomb_is_stopped_and_leaves_nothing_running(hosted: Hosted) -> None:
    marker = f"600.{secrets.randbelow(10**6):06d}"  # sleep's argument: a pattern to look for
    result = execute(hosted, FORK_BOMB.replace("MARKER", marker))
    said = text(result)
    # Each run is an unprivileged uid, never root: RLIMIT_NPROC refuses the bomb's forks.
    found = re.fullmatch(r"fork refused after (\d+) BlockingIOError running (\d+)", said.strip())
    assert found, f"{result}\n--- log:\n{log_tail(hosted)}"
    made, running = int(found[1]), int(found[2])
    assert 0 < made < 4000, said
    assert running == made, said  # its sleepers all ran: what must not outlive the call
    try:
        wait_for(lambda: running_with(marker) == [], timeout_s=10)
    except AssertionError:
        pytest.fail(f"{len(running_with(marker))} of the bomb's processes outlived its call")
    assert text(execute(hosted, "print('next')\n")).strip() == "next"  # the server serves on


DAEMON = (
    "import os, sys, time\n"
    + SEEN
    + """\
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.closerange(0, 3)
        os.execvp("sleep", ["sleep", "MARKER"])
    os._exit(0)
os.wait()
print("daemon started" if await_seen(b"MARKER", 1) == 1 else "no daemon")
"""
)


def test_a_daemon_execute_leaves_does_not_outlive_its_call(hosted: Hosted) -> None:
    marker = f"900.{secrets.randbelow(10**6):06d}"
    result = execute(hosted, DAEMON.replace("MARKER", marker))
    assert text(result).strip() == "daemon started", f"{result}\n{log_tail(hosted)}"
    try:
        wait_for(lambda: running_with(marker) == [], timeout_s=10)
    except AssertionError:
        pytest.fail(f"the daemon {running_with(marker)} outlived execute's call")
