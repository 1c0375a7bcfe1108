"""Hostile tools, each a real script, against a real runner: each is contained.

Every test runs three ways: with the server as root (each run gets its own uid, a private
tmpfs for its files and /tmp); as root without CAP_SYS_ADMIN, as in most containers (its own
uid, its disk use measured instead); and as an unprivileged user created for the test
(Lambda's model: the server and every tool share one uid; where the kernel has Landlock, as
here, each run is fenced: its own directory, the system read-only, no signals out, no TCP
but the ports it is given). The server is `tests/support/hostile_driver.py` in a child
process; it holds a secret in its environment and one in its memory, runs the scenario,
then one normal call. After it, this process (root) checks that nothing of the tools is left
running or on disk.

Cases about the runner live here; cases about the store (reaching the emulator, writing the
state directory) belong beside them, as more tests taking the `stage` fixture or their own.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pwd
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import kiln
from kiln.runner import landlock
from kiln.runner.contain import SHARED_TEMP_DIRS
from kiln.runner.processes import processes_of_uids
from support.runner import private_uid_range, wait_for

DRIVER = Path(__file__).resolve().parents[2] / "support" / "hostile_driver.py"
FUNCTIONS = Path(kiln.__file__).resolve().parents[1]
TEST_USER_PREFIX = "kiln-hostile-"  # an account per module run: see test_user
SYSTEM_PYTHON = "/usr/bin/python3"  # the test user cannot reach a Python under /root


def owned_files(uids: tuple[int, int]) -> list[str]:
    """Files and directories owned by uids [low, high) in the shared temporary directories."""
    found: list[str] = []
    pending = [d for d in SHARED_TEMP_DIRS if os.path.isdir(d)]
    while pending:
        with contextlib.suppress(OSError), os.scandir(pending.pop()) as entries:
            for entry in entries:
                with contextlib.suppress(OSError):
                    info = entry.stat(follow_symlinks=False)
                    if uids[0] <= info.st_uid < uids[1] and not _kilns_own(entry, info):
                        found.append(entry.path)
                    elif stat.S_ISDIR(info.st_mode) and info.st_mode & stat.S_IWOTH:
                        pending.append(entry.path)
    return found


def _kilns_own(entry: os.DirEntry[str], info: os.stat_result) -> bool:
    """A per-uid place a Kiln server of that uid makes for itself (kiln.bundles.owned_dirs:
    `kiln-bundles-<uid>`, `kiln-build-home-<uid>`), not a tool's leftover: with one uid for
    the server and its runs, another test's server of the test user leaves one in /tmp."""
    return entry.is_dir(follow_symlinks=False) and entry.name in (
        f"kiln-bundles-{info.st_uid}",
        f"kiln-build-home-{info.st_uid}",
    )


@pytest.fixture(scope="module")
def test_user() -> Iterator[int]:
    """The uid of an unprivileged account of this module's own, created here, removed after.

    Its own: every process of the account is checked for leftovers, and other test sessions
    on the machine (another checkout's, `kiln dev` as a user) run processes of theirs.
    """
    if os.geteuid() != 0:
        pytest.skip("needs root: to run the server both as root and as another user")
    name = f"{TEST_USER_PREFIX}{secrets.token_hex(4)}"
    subprocess.run(
        ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
        check=True,
        capture_output=True,
    )
    try:
        yield pwd.getpwnam(name).pw_uid
    finally:
        subprocess.run(["userdel", name], check=False, capture_output=True)


@dataclass
class Stage:
    """One way of running the server: as root, or as the unprivileged test user."""

    mode: str  # "root", "root-without-mounts", "unprivileged"
    base: Path
    user: int
    tool_uids: tuple[int, int]  # the uids the tools run as
    server_secret: str = field(default_factory=lambda: "server-env-" + secrets.token_hex(12))

    @property
    def uid_per_run(self) -> bool:
        return self.mode != "unprivileged"

    @property
    def fenced(self) -> bool:
        """Runs under the server's uid, fenced by Landlock (no fence on older kernels)."""
        return self.mode == "unprivileged" and landlock.abi() > 0

    @property
    def isolation(self) -> str:
        """What the runner must report for each run: what keeps it apart, never more."""
        if self.mode == "unprivileged":
            return "landlock" if self.fenced else "shared"
        return "mounts" if self.mode == "root" else "uid"

    @property
    def work_root(self) -> Path:
        return self.base / "work"

    @property
    def shared(self) -> Path:
        return self.base / "shared"

    def run(self, scenario: str, **params: Any) -> dict[str, Any]:
        command = self.command(scenario, params)
        completed = subprocess.run(
            command,
            input=json.dumps(params),
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert completed.returncode == 0, completed.stderr
        report: dict[str, Any] = json.loads(completed.stdout)
        return report

    def start(self, scenario: str, **params: Any) -> subprocess.Popen[str]:
        """The server of a scenario, left running (for a test that kills it)."""
        server = subprocess.Popen(
            self.command(scenario, params),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=self.env,
            text=True,
        )
        assert server.stdin is not None
        server.stdin.write(json.dumps(params))
        server.stdin.close()
        return server

    @property
    def env(self) -> dict[str, str]:
        return {
            "PYTHONPATH": str(FUNCTIONS),
            "PATH": "/usr/bin:/bin",
            "SERVER_SECRET": self.server_secret,
        }

    def command(self, scenario: str, params: dict[str, Any]) -> list[str]:
        params.update(work_root=str(self.work_root), shared=str(self.shared))
        if self.mode == "root":
            command = [sys.executable, str(DRIVER), scenario]
            params["run_uids"] = list(self.tool_uids)
        elif self.mode == "root-without-mounts":
            drop = ("setpriv", "--inh-caps=-sys_admin", "--bounding-set=-sys_admin")
            command = [*drop, SYSTEM_PYTHON, str(DRIVER), scenario]
            params["run_uids"] = list(self.tool_uids)
        else:
            command = [
                *("setpriv", f"--reuid={self.user}", f"--regid={self.user}", "--clear-groups"),
                *(SYSTEM_PYTHON, str(DRIVER), scenario),
            ]
        return command

    def assert_contained(self, report: dict[str, Any]) -> None:
        """The next call was normal; nothing of the tools is running or on disk."""
        assert report["next_call"] == "normal"
        wait_for(lambda: processes_of_uids(*self.tool_uids) == [], timeout_s=5.0)
        assert owned_files(self.tool_uids) == []
        assert list(self.work_root.iterdir()) == []


@pytest.fixture(params=["root", "root-without-mounts", "unprivileged"])
def stage(request: pytest.FixtureRequest, test_user: int) -> Iterator[Stage]:
    if request.param != "root" and not (shutil.which("setpriv") and Path(SYSTEM_PYTHON).exists()):
        pytest.skip("needs setpriv and /usr/bin/python3 to run the server with less power")
    base = Path(tempfile.mkdtemp(prefix="kiln-hostile-"))
    base.chmod(0o755)
    if request.param == "unprivileged":
        tool_uids = (test_user, test_user + 1)
    else:
        tool_uids = private_uid_range()
    (base / "work").mkdir()
    (base / "shared").mkdir()
    (base / "shared").chmod(0o1777)
    if request.param == "unprivileged":
        os.chown(base / "work", test_user, test_user)
    try:
        yield Stage(request.param, base, test_user, tool_uids)
    finally:
        for pid in processes_of_uids(*tool_uids):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        for path in owned_files(tool_uids):
            shutil.rmtree(path, ignore_errors=True)
            with contextlib.suppress(OSError):
                os.unlink(path)
        shutil.rmtree(base, ignore_errors=True)


def output_of(report: dict[str, Any], run: str) -> Any:
    """A run's JSON report; if it printed none, the failure shows what it did print and its
    stderr (a tool killed at its memory limit, say), not a bare JSONDecodeError."""
    try:
        return json.loads(report[run]["stdout"])
    except ValueError:
        raise AssertionError(
            f"the {run} run printed no JSON report; its output, stderr and exit:\n"
            f"{report[run]['text'][-3000:]}\nrunner error: {report[run]['runner_error']}"
        ) from None


def snoop_report(report: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = output_of(report, "snoop")
    return found


@pytest.mark.parametrize("victim", ["python", "node"])
def test_a_tool_cannot_read_the_secret_code_files_or_arguments_of_a_tool_running_beside_it(
    stage: Stage, victim: str
) -> None:
    hidden = {
        what: f"{what}-{secrets.token_hex(12)}" for what in ("env", "code", "file", "argument")
    }
    own = "snoop-own-" + secrets.token_hex(12)
    report = stage.run("neighbours", victim=victim, secrets=hidden, own=own)
    snoop = snoop_report(report)
    assert snoop["found"] == [own]  # its own secret, and nothing of the victim's
    assert report["victim"]["stdout"].startswith("victim had its secret " + hidden["argument"][:6])
    if stage.uid_per_run:
        assert snoop["victim_alive"], "the two runs did not overlap; the test proved nothing"
    else:
        # One uid for all: runs that could read each other's processes are not run together.
        assert not snoop["victim_alive"]
    stage.assert_contained(report)


def test_a_tool_cannot_read_the_servers_environment_or_memory(stage: Stage) -> None:
    own = "snoop-own-" + secrets.token_hex(12)
    report = stage.run("server_secrets", own=own)
    snoop = snoop_report(report)
    assert snoop["found"] == [own]
    assert snoop["opened"].get("cmdline", 0) > 1  # it really looked at other processes
    assert report["snoop"]["isolation"] == stage.isolation
    stage.assert_contained(report)


def test_a_tool_that_kills_its_supervisor_and_the_helper_leaves_no_daemon(stage: Stage) -> None:
    report = stage.run("escape")
    escape = report["escape"]
    # Other uids, or a Landlock fence that scopes signals (ABI 6): it cannot signal them.
    if stage.uid_per_run or (stage.fenced and landlock.abi() >= 6):
        assert escape["stdout"] == (
            "could not kill the helper: PermissionError; "
            "could not kill the supervisor: PermissionError\n"
        )
    else:  # one uid: it can, and the server finds the orphans it left
        assert escape["runner_error"] == (
            "the run's supervisor ended without reporting (was it killed?)"
        )
        assert report["helper_after"] != report["helper_before"]
    assert report["daemon_alive"] is False
    stage.assert_contained(report)


def test_a_tool_that_fills_the_temporary_directories_is_stopped_at_its_quota(
    stage: Stage,
) -> None:
    quota_mib = 64
    report = stage.run("fill", quota=quota_mib << 20)
    text = report["fill"]["text"]
    assert "wrote 512 MiB" not in text
    if stage.mode == "root":  # a tmpfs of the quota's size: the write past it fails
        assert text.startswith("stopped after "), text
        assert text.endswith("OSError errno 28\n[exit 3]"), text
        assert int(text.split()[2]) <= quota_mib
    else:  # no tmpfs: measured, and stopped within moments of passing the quota
        assert text.endswith(
            f"[disk quota] stopped after writing more than {quota_mib} MiB of files "
            "(the run's quota)"
        ), text
        assert report["fill"]["quota"] == quota_mib << 20
    stage.assert_contained(report)


def test_what_a_tool_leaves_in_tmp_is_removed_but_not_what_the_server_made_meanwhile(
    stage: Stage,
) -> None:
    own = f"/tmp/kiln-own-{secrets.token_hex(6)}"
    litter = f"/tmp/litter-{secrets.token_hex(6)}"
    try:
        report = stage.run("litter", own_path=own, litter=litter)
        if stage.fenced:  # /tmp is outside its fence: it cannot litter at all
            assert "PermissionError: [Errno 13]" in report["litter"]["text"]
        else:
            assert report["litter"]["text"] == "littered"
        assert report["own_kept"] is True
        assert report["litter_left"] is False
        assert not os.path.exists(litter)  # as the server's host sees /tmp, too
        shutil.rmtree(own)  # the server's, made by the server: not a leftover of the tool
        stage.assert_contained(report)
    finally:
        shutil.rmtree(own, ignore_errors=True)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(litter)


SERVERS_OWN = (
    "read the server's key",
    "list the server's directory",
    "write into the server's directory",
    "read another run's file",
    "list another run's directory",
    "write beside its directory",
)


def test_a_tool_cannot_reach_the_servers_files_another_runs_files_or_a_port_kept_from_runs(
    stage: Stage,
) -> None:
    if stage.mode == "unprivileged" and not stage.fenced:
        pytest.skip("no Landlock: a run under the server's uid reaches what it can (README)")
    tmp_path = f"/tmp/kiln-reach-{secrets.token_hex(6)}"
    report = stage.run("reach", tcp_ports=[80, 443], tmp_path=tmp_path)
    outcome = output_of(report, "reach")
    assert outcome["write its own directory"] == "done", outcome
    assert outcome["write the shared directory"] == "done", outcome
    for attempt in SERVERS_OWN:
        # Refused (as another uid, or fenced), or not there at all (a private /tmp).
        assert outcome[attempt] in ("PermissionError", "FileNotFoundError"), (attempt, outcome)
    if landlock.abi() >= 4:  # the network fence: as root too
        assert outcome["connect to the kept port"] == "PermissionError"
    if stage.fenced:  # one uid: only the fence stands between it and the server's files
        assert {outcome[attempt] for attempt in SERVERS_OWN} == {"PermissionError"}
        assert outcome["write /tmp"] == "PermissionError"
    assert report["reach"]["isolation"] == stage.isolation
    assert not os.path.exists(tmp_path)
    stage.assert_contained(report)


def test_a_tool_can_neither_read_nor_kill_another_tools_standby(stage: Stage) -> None:
    """A standby waits beside other tools' runs; they must not reach it before its call."""
    if stage.mode == "unprivileged" and (not stage.fenced or landlock.abi() < 6):
        pytest.skip("one uid without Landlock's signal scope (ABI 6): runs get no standbys")
    secrets_ = {"argument": f"arg-{secrets.token_hex(8)}", "env": f"env-{secrets.token_hex(8)}"}
    report = stage.run("standby", secrets=secrets_)
    assert report["prepared"] is True
    attack = output_of(report, "attack")
    assert attack["others"] >= 2, attack  # it did find the standby's supervisor and script
    assert (attack["read"], attack["killed"]) == (0, 0), attack
    # The standby answered its call, untouched, with the call's own secret and argument.
    assert report["victim_standby"] is True
    victim = output_of(report, "victim")
    assert victim == {"token": secrets_["env"], "arg": secrets_["argument"]}
    stage.assert_contained(report)


@contextlib.contextmanager
def listening_sockets(*names: str) -> Iterator[dict[str, str]]:
    """Listening unix sockets anyone may connect to, in a directory under /run (as on a
    developer's machine: a world-writable socket of a service, a docker.sock)."""
    place = Path(tempfile.mkdtemp(prefix="kiln-hostile-", dir="/run"))
    place.chmod(0o755)
    held: list[Any] = []
    try:
        paths = {}
        for name in names:
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            listener.bind(str(place / name))
            (place / name).chmod(0o777)
            listener.listen(16)
            held.append(listener)
            paths[name] = str(place / name)
        yield paths
    finally:
        for listener in held:
            listener.close()
        shutil.rmtree(place, ignore_errors=True)


@pytest.mark.parametrize("opted_in", [False, True], ids=["refused", "opted-in"])
def test_a_tool_cannot_connect_to_a_named_unix_socket_unless_the_server_allows_it(
    stage: Stage, opted_in: bool
) -> None:
    """The server's own 0600 socket, a world-writable one in /run, a docker.sock: none
    reachable (Landlock scopes only abstract sockets; another uid opens a 0777 one)."""
    with listening_sockets("world.sock", "docker.sock") as paths:
        place = str(Path(paths["world.sock"]).parent)
        report = stage.run(
            "sockets", places=[place], paths=list(paths.values()), unix_sockets=opted_in
        )
        text = report["sockets"]["text"]
        outcome = json.loads(report["sockets"]["stdout"] or "null") or pytest.fail(text)
    assert set(paths.values()) <= set(outcome["listed"]), outcome  # it found them itself
    assert outcome["socketpair"] == "x", outcome  # asyncio's self-pipe keeps working
    tried = outcome["connect"]
    if opted_in:  # KILN_RUN_UNIX_SOCKETS: the kernel's own permissions decide
        assert tried[paths["world.sock"]] == "connected", tried
    else:
        assert "connected" not in tried.values(), tried
        assert {tried[p] for p in paths.values()} == {"PermissionError"}, tried
        assert tried[report["server_socket"]] in ("PermissionError", "FileNotFoundError"), tried
    stage.assert_contained(report)


@pytest.mark.parametrize("fence", ["fenced", "unfenced"])
@pytest.mark.parametrize("mode", ["threads", "supervisor", "refork"])
def test_a_daemon_whose_leader_ended_while_its_thread_runs_does_not_outlive_its_call(
    stage: Stage, mode: str, fence: str
) -> None:
    """Double fork, `setsid`, a second thread, then `exit` of the main thread alone: the
    leader reads Z while the thread runs. It is killed with its call (and with `supervisor`
    after killing its supervisor and the helper; with `refork`, forking all the while)."""
    if fence == "unfenced" and stage.mode != "unprivileged":
        pytest.skip("a uid of its own per run: the fence is not what contains it")
    unfenced = {"no_landlock": True} if fence == "unfenced" else {}
    report = stage.run("thread_daemon", mode=mode, **unfenced)
    run = report["thread_daemon"]
    assert run["text"].startswith("planted") or run["runner_error"], run
    assert report["live"] == [], (
        f"after its call, the daemon {report['daemon']} still runs threads {report['live']}; "
        f"its run: {run}"
    )
    stage.assert_contained(report)


def process_state(pid: int) -> str:
    """R, S, ... for a live process; Z (a zombie) or X (gone) for one that has ended."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "X"


def test_nothing_a_run_started_outlives_a_kill_9_of_its_server(stage: Stage) -> None:
    """A long task and the daemon it left in its own session, then `kill -9` of the server:
    both stop (they would otherwise run their minute out with no one to answer)."""
    server = stage.start("abandoned")
    try:
        assert server.stdout is not None
        line = server.stdout.readline()  # the driver says which processes the task made
        assert line, server.stderr.read() if server.stderr else "no output"
        made = json.loads(line)
        for name in ("script", "daemon", "helper"):
            assert process_state(made[name]) not in ("Z", "X"), (name, made)
        server.kill()
        server.wait(timeout=10)
        try:
            wait_for(lambda: all(process_state(pid) in ("Z", "X") for pid in made.values()), 8.0)
        except AssertionError:
            states = {name: process_state(pid) for name, pid in made.items()}
            pytest.fail(f"8 s after kill -9 of the server, still running: {states}")
        wait_for(lambda: processes_of_uids(*stage.tool_uids) == [], timeout_s=5.0)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait(timeout=10)
        for stream in (server.stdout, server.stderr):
            if stream is not None:
                stream.close()


REFUSED = ("PermissionError", "OSError")  # EACCES or EPERM; EROFS on a read-only mount


def bundle_place(stage: Stage) -> Path:
    """A folder of the server's own for its build and its bundle cache."""
    place = stage.base / "place"
    place.mkdir()
    place.chmod(0o755)  # runs of other uids read the bundle below it
    if stage.mode == "unprivileged":
        os.chown(place, stage.user, stage.user)
    return place


def test_a_bundle_handed_over_from_its_build_cannot_be_changed_by_its_tool(
    stage: Stage,
) -> None:
    report = stage.run("bundle_write", place=str(bundle_place(stage)))
    outcome = output_of(report, "bundle_write")
    assert report["shares_inode"] is False  # a copy: no chmod of the build's file reaches it
    assert outcome["imported from the bundle"] is True, outcome
    for attempt_ in ("append", "truncate", "create beside"):
        assert outcome[attempt_] in REFUSED, (attempt_, outcome)
    if stage.uid_per_run:  # a read-only mount, or another uid's file
        assert outcome["chmod"] in REFUSED, outcome
    else:  # Landlock rules no file modes: the fence alone keeps the file unwritable
        assert outcome["chmod"] == "done", outcome
    assert report["unchanged"] is True
    assert report["mode"] == "0o444"
    assert report["bundle_write"]["isolation"] == stage.isolation
    stage.assert_contained(report)


def test_without_a_fence_a_bundle_file_refuses_a_plain_write_but_not_a_changed_mode(
    stage: Stage,
) -> None:
    """One uid and no fence (Lambda's kernels, old ones): the file's mode is all there is."""
    if stage.mode != "unprivileged":
        pytest.skip("a uid of its own per run: see the test above")
    report = stage.run("bundle_write", place=str(bundle_place(stage)), no_landlock=True)
    outcome = output_of(report, "bundle_write")
    assert report["bundle_write"]["isolation"] == "shared"
    assert outcome["append"] == "PermissionError", outcome
    assert outcome["truncate"] == "PermissionError", outcome
    assert report["unchanged"] is True
    # What the README's known limits say: the server's uid, unfenced, can change its files.
    assert outcome["chmod"] == "done", outcome
    assert outcome["create beside"] == "done", outcome
    stage.assert_contained(report)


def test_every_run_finds_its_own_kiln_tools_and_no_run_changes_another_runs(
    stage: Stage,
) -> None:
    """The helper for calling tools is written into each run's own directory: readable
    there in every uid model, changed by nobody but that run, for nobody but itself."""
    report = stage.run("helper")
    tamper = output_of(report, "tamper")
    assert tamper["found"] is True, tamper
    assert tamper["its own copy"] == "done"  # its own, gone with it
    # Not writable, or not even there for the run: a checkout under /tmp is behind the run's
    # own /tmp (a mount namespace), one elsewhere is another uid's or read-only.
    refused = {tamper["the server's source"], tamper["the server's node source"]}
    assert refused <= {"PermissionError", "FileNotFoundError"}, tamper
    source = FUNCTIONS / "kiln" / "runner" / "kiln_tools"
    for language, names in (("python", ["__init__.py"]), ("node", ["index.js", "package.json"])):
        pristine = {
            name: hashlib.sha256((source / name).read_bytes()).hexdigest() for name in names
        }
        later = output_of(report, language)
        assert later == {"value": 1.5, "files": pristine}, (language, later)
    stage.assert_contained(report)
