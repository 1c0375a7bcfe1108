"""A stand-in server for the hostile-tool tests: runs one scenario of hostile tools, prints JSON.

Run as `python hostile_driver.py SCENARIO < PARAMS_JSON` with `functions/` on PYTHONPATH, as
root (each run gets its own uid) or as an unprivileged user (Lambda's model: one uid). It
holds secrets the tools must not reach: SERVER_SECRET in its environment (from exec, so in
/proc/PID/environ) and MEMORY_SECRET in its memory. Each scenario returns what the tools
saw and what happened to them; the test decides whether that was contained.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from kiln.runner import Runner, RunnerSettings, RunRequest, RunResult, contract_text
from kiln.runner.processes import descendants

MEMORY_SECRET = os.environ.get("SERVER_SECRET", "").replace("env", "memory").encode()

# Collects everything it can read about other processes and other runs, then reports which
# of the needles (given as its arguments) it found. Its own token is found through its own
# environment: the proof that the search works.
SNOOP = r"""
import json, os, sys, time
args = json.load(sys.stdin)
shared = os.environ["SHARED_DIR"]
deadline = time.time() + 5
while args["wait_for_victim"] and not os.path.exists(os.path.join(shared, "victim.pid")):
    if time.time() > deadline:
        break
    time.sleep(0.01)
victim = None
if os.path.exists(os.path.join(shared, "victim.pid")):
    victim = int(open(os.path.join(shared, "victim.pid")).read())
victim_alive = victim is not None and os.path.exists(f"/proc/{victim}") and not os.path.exists(
    os.path.join(shared, "victim.done"))
# Each piece is searched as it is read and let go: whatever else the machine holds (gigabytes
# of files in /tmp), the snoop stays within its memory limit and its time. At most FILES files
# and BYTES bytes of them are read (the victim's run directory is walked first).
needles = [n.encode() for n in args["needles"]]
found_set = set()
opened = {}
budget = {"files": 5000, "bytes": 64 << 20}
def search(data):
    for needle in needles:
        if needle in data:
            found_set.add(needle.decode())
search(json.dumps(dict(os.environ)).encode())
def take(path, limit=1 << 20):
    if budget["files"] <= 0 or budget["bytes"] <= 0:
        return
    try:
        with open(path, "rb") as f:
            data = f.read(min(limit, budget["bytes"]))
    except OSError:
        return
    budget["files"] -= 1
    budget["bytes"] -= len(data)
    search(data)
    opened[path.split("/")[-1]] = opened.get(path.split("/")[-1], 0) + 1
def memory(pid):
    try:
        maps = open(f"/proc/{pid}/maps").read().splitlines()
        mem = open(f"/proc/{pid}/mem", "rb")
    except OSError:
        return
    overlap = max((len(n) for n in needles), default=1)
    for line in maps:
        span, perms = line.split()[:2]
        if "r" not in perms:
            continue
        start, end = (int(x, 16) for x in span.split("-"))
        if end - start > 64 << 20:
            continue
        tail = b""
        try:
            for at in range(start, end, 1 << 20):
                mem.seek(at)
                piece = mem.read(min(1 << 20, end - at))
                search(tail + piece)
                tail = piece[-overlap:]
            opened["mem"] = opened.get("mem", 0) + 1
        except (OSError, ValueError, OverflowError):
            pass
for pid in [p for p in os.listdir("/proc") if p.isdigit()]:
    if int(pid) == os.getpid():
        continue
    for part in ("environ", "cmdline"):
        take(f"/proc/{pid}/{part}")
    memory(pid)
    for fd in ("0", "3"):
        take(f"/proc/{pid}/fd/{fd}")
here = os.getcwd()
for top in [os.path.dirname(here), args["work_root"], "/dev/shm", "/var/tmp", "/tmp"]:
    for root, dirs, files in os.walk(top):
        for name in files:
            take(os.path.join(root, name))
found = [needle for needle in args["needles"] if needle in found_set]
print(json.dumps({"found": found, "victim_alive": victim_alive, "opened": opened}))
"""

VICTIM_PY = r"""
import json, os, sys, time
args = json.load(sys.stdin)
shared = os.environ["SHARED_DIR"]
open("victim-file.txt", "w").write(os.environ["FILE_SECRET"])
code_secret = "CODE_SECRET_PLACEHOLDER"
with open(os.path.join(shared, "victim.pid.tmp"), "w") as f:
    f.write(str(os.getpid()))
os.rename(os.path.join(shared, "victim.pid.tmp"), os.path.join(shared, "victim.pid"))
deadline = time.time() + 4
while not os.path.exists(os.path.join(shared, "snoop.done")) and time.time() < deadline:
    time.sleep(0.01)
open(os.path.join(shared, "victim.done"), "w").close()
print("victim had", "its secret" if os.environ.get("VICTIM_TOKEN") else "nothing", args["arg"][:6])
"""

VICTIM_NODE = r"""
const fs = require('node:fs');
const path = require('node:path');
const args = JSON.parse(fs.readFileSync(0, 'utf8'));
const shared = process.env.SHARED_DIR;
fs.writeFileSync('victim-file.txt', process.env.FILE_SECRET);
const codeSecret = 'CODE_SECRET_PLACEHOLDER';
fs.writeFileSync(path.join(shared, 'victim.pid.tmp'), String(process.pid));
fs.renameSync(path.join(shared, 'victim.pid.tmp'), path.join(shared, 'victim.pid'));
const deadline = Date.now() + 4000;
const wait = () => {
  if (!fs.existsSync(path.join(shared, 'snoop.done')) && Date.now() < deadline) {
    setTimeout(wait, 10);
    return;
  }
  fs.writeFileSync(path.join(shared, 'victim.done'), '');
  const had = process.env.VICTIM_TOKEN ? 'its secret' : 'nothing';
  console.log('victim had', had, args.arg.slice(0, 6), codeSecret.length);
};
wait();
"""

# The end of a tool that kills its supervisor and the helper (its parent and grandparent; the
# helper alone, its parent, where the helper supervises the run itself: the runner function's
# direct runs): every process above it that runs supervisor.py. Adds what happened to `report`.
KILL_CHAIN = r"""
chain, pid = [], os.getppid()
while b"supervisor.py" in open(f"/proc/{pid}/cmdline", "rb").read():
    chain.append(pid)
    pid = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
for name, pid in reversed(list(zip(["supervisor", "helper"][2 - len(chain):], chain))):
    try:
        os.kill(pid, signal.SIGKILL)
        report.append(f"killed the {name}")
    except OSError as e:
        report.append(f"could not kill the {name}: {type(e).__name__}")
print("; ".join(report), flush=True)
"""

# Starts a daemon, then kills its supervisor and the helper (its parent and grandparent).
ESCAPE = (
    r"""
import os, signal, sys, time
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
report = []
"""
    + KILL_CHAIN
)

FILL = r"""
import os, sys
written = 0
places = ["/tmp", os.getcwd(), "/dev/shm", "/var/tmp"]
chunk = b"x" * (4 << 20)
try:
    for i in range(128):
        try:
            f = open(os.path.join(places[i % len(places)], f"fill-{i}.bin"), "wb")
        except PermissionError:
            continue  # a place fenced off from the run: fill the others
        with f:
            f.write(chunk)
        written += len(chunk)
except OSError as e:
    print(f"stopped after {written >> 20} MiB: {type(e).__name__} errno {e.errno}", flush=True)
    sys.exit(3)
print(f"wrote {written >> 20} MiB", flush=True)
"""


# Tries every place a run must not reach: the server's private directory (its key), another
# run's directory, writing beside its own or in /tmp, a loopback port kept from runs; and,
# as the proof that it works at all, its own and the shared directory.
REACH = r"""
import json, os, socket, sys
args = json.load(sys.stdin)
out = {}
def attempt(name, action):
    try:
        action()
        out[name] = "done"
    except OSError as error:
        out[name] = type(error).__name__
state, other = args["state"], args["other_run"]
attempt("read the server's key", lambda: open(os.path.join(state, "credentials.json")).read())
attempt("list the server's directory", lambda: os.listdir(state))
attempt("write into the server's directory", lambda: open(os.path.join(state, "x"), "w"))
attempt("read another run's file", lambda: open(os.path.join(other, "secret.txt")).read())
attempt("list another run's directory", lambda: os.listdir(other))
attempt("write beside its directory", lambda: open(os.path.join(args["work_root"], "x"), "w"))
attempt("write /tmp", lambda: open(args["tmp_path"], "w"))
attempt("connect to the kept port",
        lambda: socket.create_connection(("127.0.0.1", args["port"]), timeout=3).close())
attempt("write its own directory", lambda: open("own.txt", "w"))
attempt("write the shared directory",
        lambda: open(os.path.join(os.environ["SHARED_DIR"], "reach.txt"), "w"))
print(json.dumps(out))
"""

# Leaves a file in /tmp, after the server has made a place of its own there mid-run.
LITTER = r"""
import json, os, sys, time
args = json.load(sys.stdin)
while not os.path.exists(os.path.join(os.environ["SHARED_DIR"], "go")):
    time.sleep(0.01)
with open(args["litter"], "w") as f:
    f.write("left behind")
print("littered")
"""


# Finds the named unix sockets it can see (/proc/net/unix lists every one on the machine; it
# tries those of the test's places) and connects to each; and makes a socketpair, which
# asyncio needs and which must keep working.
SOCKETS = r"""
import json, os, socket, sys
args = json.load(sys.stdin)
listed = set()
with open("/proc/net/unix") as f:
    for line in f.read().splitlines()[1:]:
        parts = line.split()
        if len(parts) > 7 and parts[7].startswith(tuple(args["places"])):
            listed.add(parts[7])
out = {"listed": sorted(listed), "connect": {}}
for path in sorted(listed | set(args["paths"])):
    try:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(3)
        s.connect(path)
        s.close()
        out["connect"][path] = "connected"
    except OSError as error:
        out["connect"][path] = type(error).__name__
a, b = socket.socketpair()
a.sendall(b"x")
out["socketpair"] = b.recv(1).decode()
print(json.dumps(out))
"""


# A long task: it leaves a daemon in a session of its own, and both keep beating (a file
# touched every 50 ms) for a minute unless stopped.
LONG_TASK = r"""
import os, sys, time
shared = os.environ["SHARED_DIR"]
def beat(name):
    with open(os.path.join(shared, name + ".pid.tmp"), "w") as f:
        f.write(str(os.getpid()))
    os.rename(os.path.join(shared, name + ".pid.tmp"), os.path.join(shared, name + ".pid"))
    for _ in range(1200):
        os.utime(os.path.join(shared, name + ".pid"))
        time.sleep(0.05)
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        beat("daemon")
    os._exit(0)
beat("script")
print("ran to its end")
"""


def settings(params: dict[str, Any]) -> RunnerSettings:
    uids = params.get("run_uids")
    own = (Path(params["own_path"]),) if params.get("own_path") else ()
    return RunnerSettings(
        own_temp_paths=own,
        work_root=Path(params["work_root"]),
        shared_dirs=(Path(params["shared"]),),
        run_uids=tuple(uids) if uids else None,  # type: ignore[arg-type]
        disk_quota_bytes=params.get("quota", 256 << 20),
        sweep_shared_temp=True,
        tcp_ports=tuple(params["tcp_ports"]) if "tcp_ports" in params else None,
        python_executable=Path(sys.executable),
        standby_runs=params.get("standby_runs", 4),  # as kiln dev runs: standbys on
        # Only when asked: the same attack then runs against a runner without the setting.
        **({"unix_sockets": True} if params.get("unix_sockets") else {}),  # type: ignore[arg-type]
        **({"landlock": False} if params.get("no_landlock") else {}),  # type: ignore[arg-type]
    )


def request(code: str, params: dict[str, Any], **fields: Any) -> RunRequest:
    env = {"SHARED_DIR": params["shared"], **fields.pop("extra_env", {})}
    fields.setdefault("arguments", {})
    return RunRequest(code=code, timeout_s=fields.pop("timeout_s", 20), extra_env=env, **fields)


def summary(result: RunResult) -> dict[str, Any]:
    return {
        "text": contract_text(result),
        "stdout": result.stdout,
        "runner_error": result.runner_error,
        "quota": result.disk_quota_bytes,
        "isolation": result.isolation,
    }


async def neighbours(runner: Runner, params: dict[str, Any]) -> dict[str, Any]:
    """A snoop runs while a victim holds secrets in its environment, code, files, arguments."""
    s = params["secrets"]
    victim_code = (VICTIM_NODE if params["victim"] == "node" else VICTIM_PY).replace(
        "CODE_SECRET_PLACEHOLDER", s["code"]
    )
    victim = runner.run(
        request(
            victim_code,
            params,
            language=params["victim"],
            arguments={"arg": s["argument"]},
            extra_env={"VICTIM_TOKEN": s["env"], "FILE_SECRET": s["file"]},
        )
    )

    async def snoop() -> RunResult:
        await asyncio.sleep(0.05)  # let the victim take the first turn
        needles = [*s.values(), params["own"]]
        args = {"needles": needles, "work_root": params["work_root"], "wait_for_victim": True}
        result = await runner.run(
            request(SNOOP, params, language="python", arguments=args,
                    extra_env={"SNOOP_TOKEN": params["own"]})
        )  # fmt: skip
        os.close(os.open(os.path.join(params["shared"], "snoop.done"), os.O_CREAT | os.O_WRONLY))
        return result

    victim_result, snoop_result = await asyncio.gather(victim, snoop())
    return {"victim": summary(victim_result), "snoop": summary(snoop_result)}


async def server_secrets(runner: Runner, params: dict[str, Any]) -> dict[str, Any]:
    """A snoop looks for the server's environment and memory."""
    needles = [os.environ["SERVER_SECRET"], MEMORY_SECRET.decode(), params["own"]]
    args = {"needles": needles, "work_root": params["work_root"], "wait_for_victim": False}
    result = await runner.run(
        request(SNOOP, params, language="python", arguments=args,
                extra_env={"SNOOP_TOKEN": params["own"]})
    )  # fmt: skip
    return {"snoop": summary(result)}


async def escape(runner: Runner, params: dict[str, Any]) -> dict[str, Any]:
    """A tool kills its supervisor and the helper, leaving a daemon."""
    helper_before = runner.helper_pid
    result = await runner.run(request(ESCAPE, params, language="python", timeout_s=5))
    with open(os.path.join(params["shared"], "daemon.pid")) as f:  # noqa: ASYNC230
        daemon = int(f.read())
    return {
        "escape": summary(result),
        "daemon": daemon,
        "daemon_alive": _state(daemon) not in ("Z", "X"),
        "helper_before": helper_before,
    }


async def fill(runner: Runner, params: dict[str, Any]) -> dict[str, Any]:
    """A tool writes 512 MiB into its directories and every shared temporary directory."""
    return {"fill": summary(await runner.run(request(FILL, params, language="python")))}


async def litter(runner: Runner, params: dict[str, Any]) -> dict[str, Any]:
    """A tool litters /tmp while the server makes its own place there (a bundle cache)."""
    args = {"own": params["own_path"], "litter": params["litter"]}
    run = asyncio.create_task(
        runner.run(request(LITTER, params, language="python", arguments=args))
    )
    await asyncio.sleep(0.2)
    os.mkdir(params["own_path"])
    os.close(os.open(os.path.join(params["shared"], "go"), os.O_CREAT | os.O_WRONLY))
    result = await run
    await asyncio.to_thread(runner.settle)  # with standbys, clean-up follows the answer
    own_kept, litter_left = await asyncio.to_thread(
        lambda: (os.path.isdir(params["own_path"]), os.path.exists(params["litter"]))
    )
    return {"litter": summary(result), "own_kept": own_kept, "litter_left": litter_left}


async def reach(runner: Runner, params: dict[str, Any]) -> dict[str, Any]:
    """A tool tries the server's private files, another run's, and a port kept from runs."""
    state = tempfile.mkdtemp(prefix="kiln-server-state-")  # 0700, like kiln dev's
    other = tempfile.mkdtemp(prefix="kiln-run-", dir=params["work_root"])  # 0700, as a run's
    listener = socket.create_server(("127.0.0.1", 0))
    try:
        for folder, name in ((state, "credentials.json"), (other, "secret.txt")):
            with open(os.path.join(folder, name), "w") as f:  # noqa: ASYNC230 - tiny, local
                f.write("secret")
        args = {"state": state, "other_run": other, "work_root": params["work_root"],
                "tmp_path": params["tmp_path"], "port": listener.getsockname()[1]}  # fmt: skip
        result = await runner.run(request(REACH, params, language="python", arguments=args))
    finally:
        listener.close()
        shutil.rmtree(state, ignore_errors=True)
        shutil.rmtree(other, ignore_errors=True)
    return {"reach": summary(result)}


# Finds the other runs of its server (the other descendants of the helper that forked its own
# supervisor) and tries to read and kill each: a standby waiting for its tool's call is one.
INTERFERE = r"""
import json, os, signal

def stat(pid):
    data = open(f"/proc/{pid}/stat").read()
    return int(data[data.rfind(")") + 2 :].split()[1])

me = os.getpid()
helper = stat(stat(me))  # script -> its supervisor -> the helper
children = {}
for name in os.listdir("/proc"):
    if name.isdigit():
        try:
            children.setdefault(stat(name), []).append(int(name))
        except (OSError, ValueError, IndexError):
            pass
others, queue = [], [helper]
while queue:
    for pid in children.get(queue.pop(), []):
        queue.append(pid)
        if pid not in (me, stat(me)):
            others.append(pid)
out = {"others": len(others), "read": 0, "killed": 0}
for pid in others:
    for part in ("environ", "mem", "cwd"):
        try:
            if part == "cwd":
                os.listdir(f"/proc/{pid}/cwd")
            else:
                with open(f"/proc/{pid}/{part}", "rb") as f:
                    f.read(1)
            out["read"] += 1
        except OSError:
            pass
    try:
        os.kill(pid, signal.SIGKILL)
        out["killed"] += 1
    except OSError:
        pass
print(json.dumps(out))
"""


async def standby(runner: Runner, params: dict[str, Any]) -> dict[str, Any]:
    """A tool goes after another tool's standby (prepared, waiting for its call)."""
    s = params["secrets"]
    victim = request(
        "import json, os, sys\nargs = json.load(sys.stdin)\n"
        "print(json.dumps({'token': os.environ.get('VICTIM_TOKEN'), 'arg': args['arg']}))\n",
        params,
        language="python",
        arguments={"arg": s["argument"]},
        extra_env={"VICTIM_TOKEN": s["env"]},
    )
    prepared = await asyncio.to_thread(runner.prepare, victim)
    give_up = time.monotonic() + 5  # the helper forks its supervisor and script in its own time
    while len(descendants(runner.helper_pid or 0)) < 2 and time.monotonic() < give_up:  # noqa: ASYNC110
        await asyncio.sleep(0.01)
    attack = await runner.run(request(INTERFERE, params, language="python"))
    called = await runner.run(victim)
    return {
        "prepared": prepared,
        "attack": summary(attack),
        "victim": summary(called),
        "victim_standby": called.standby,
    }


async def sockets(runner: Runner, params: dict[str, Any]) -> dict[str, Any]:
    """A tool connects to every named unix socket it finds: the server's own among them."""
    own_dir = tempfile.mkdtemp(prefix="kiln-server-sockets-")  # 0700, the server's alone
    own = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        own.bind(os.path.join(own_dir, "server.sock"))
        os.chmod(own.getsockname(), 0o600)
        own.listen(8)
        args = {"places": [*params["places"], own_dir],
                "paths": [*params["paths"], own.getsockname()]}  # fmt: skip
        result = await runner.run(request(SOCKETS, params, language="python", arguments=args))
    finally:
        own.close()
        shutil.rmtree(own_dir, ignore_errors=True)
    return {"sockets": summary(result), "server_socket": os.path.join(own_dir, "server.sock")}


async def abandoned(runner: Runner, params: dict[str, Any]) -> dict[str, Any]:
    """Starts a long task, says which processes it made, then waits to be killed (-9)."""
    run = asyncio.create_task(
        runner.run(request(LONG_TASK, params, language="python", timeout_s=60))
    )
    pids = {}
    for name in ("script", "daemon"):
        path = os.path.join(params["shared"], name + ".pid")
        while not os.path.exists(path):  # noqa: ASYNC110, ASYNC240 - another process writes it
            await asyncio.sleep(0.01)
        with open(path) as f:  # noqa: ASYNC230 - tiny, local
            pids[name] = int(f.read())
    print(json.dumps({**pids, "helper": runner.helper_pid}), flush=True)
    await run  # the test kills this process long before the task's minute is up
    return {"abandoned": "ran to its end: the test did not kill the server"}


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "X"


# A daemon that is a thread group whose leader has ended (double fork, `setsid`, a second
# thread, then the raw `exit` system call on the main thread: its /proc/PID/stat reads Z while
# the thread runs on): `plant(daemon_thread)` starts one, and `leader_ended()` waits in that
# thread until only threads run. Shared with tests/e2e/test_lambda_leftovers.py.
LEADER_ENDS = r"""
import ctypes, os, platform, threading, time

def leader_ended():
    leader = f"/proc/{os.getpid()}/stat"
    while open(leader).read().rsplit(")", 1)[1].split()[0] != "Z":
        time.sleep(0.001)

def plant(daemon_thread):
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.closerange(0, 3)
            threading.Thread(target=daemon_thread).start()
            ctypes.CDLL(None).syscall({"x86_64": 60, "aarch64": 93}[platform.machine()], 0)
        os._exit(0)
"""

# That daemon; with `supervisor` the tool then kills its supervisor and the helper; with
# `refork` the daemon's thread keeps forking short-lived children.
THREAD_DAEMON = (
    LEADER_ENDS
    + r"""
import json, signal, sys
mode = json.load(sys.stdin)["mode"]
shared = os.environ["SHARED_DIR"]

def daemon_thread():
    leader_ended()
    with open(os.path.join(shared, "daemon.pid.tmp"), "w") as f:
        f.write(str(os.getpid()))
    os.rename(os.path.join(shared, "daemon.pid.tmp"), os.path.join(shared, "daemon.pid"))
    while True:
        if mode == "refork":
            try:
                if os.fork() == 0:
                    time.sleep(1)
                    os._exit(0)
                while os.waitpid(-1, os.WNOHANG)[0]:
                    pass
            except OSError:
                pass
        time.sleep(0.1)

plant(daemon_thread)
while not os.path.exists(os.path.join(shared, "daemon.pid")):
    time.sleep(0.01)
report = ["planted"]
if mode != "supervisor":
    print("planted", flush=True)
    sys.exit(0)
"""
    + KILL_CHAIN
)


async def thread_daemon(runner: Runner, params: dict[str, Any]) -> dict[str, Any]:
    """A tool leaves a daemon whose leader has ended while its thread runs on."""
    run = request(THREAD_DAEMON, params, language="python", arguments={"mode": params["mode"]})
    result = await runner.run(run)
    await asyncio.to_thread(runner.settle)  # with standbys, clean-up follows the answer
    with open(os.path.join(params["shared"], "daemon.pid")) as f:  # noqa: ASYNC230
        daemon = int(f.read())
    return {"thread_daemon": summary(result), "daemon": daemon, "live": live_threads(daemon)}


def live_threads(pid: int) -> list[str]:
    """`tid state` of each thread of `pid` that has not ended (read here, not by Kiln)."""
    found = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state not in ("Z", "X"):
            found.append(f"{task} {state}")
    return found


# Tries to change the bundle it runs with: its files are copies of what the build made.
BUNDLE_WRITE = r"""
import json, os, sys
import kiln_probe  # from the bundle, on PYTHONPATH
root = json.load(sys.stdin)["bundle"]
target = os.path.join(root, "kiln_probe.py")
out = {"imported from the bundle": os.path.dirname(kiln_probe.__file__) == root}
def attempt(name, action):
    try:
        action()
        out[name] = "done"
    except OSError as error:
        out[name] = type(error).__name__
def append():
    with open(target, "a") as handle:
        handle.write("raise SystemExit('changed by a tool')\n")
attempt("append", append)
attempt("truncate", lambda: os.truncate(target, 0))
attempt("create beside", lambda: open(os.path.join(root, "sitecustomize.py"), "x").close())
attempt("chmod", lambda: os.chmod(target, 0o644))
if out["chmod"] == "done":
    os.chmod(target, 0o444)  # the deliberate way in is only reported, not taken
print(json.dumps(out))
"""


async def bundle_write(runner: Runner, params: dict[str, Any]) -> dict[str, Any]:
    """A build handed to the bundle cache (copies), then a tool that tries to change it."""
    from kiln.bundles.cache import BundleCache
    from kiln.bundles.contents import InstalledTree
    from kiln.bundles.store import BundleRecord

    place = Path(params["place"])  # the server's own, as kiln dev's state directory is
    built = place / "built"
    built.mkdir()
    source = "VALUE = 'as built'\n"
    (built / "kiln_probe.py").write_text(source)
    cache = BundleCache(None, root=place / "bundles")  # type: ignore[arg-type]  # no store used
    record = BundleRecord("ab" * 16, "building", "python", "any", (), "", "")
    assert cache.adopt_tree(record, InstalledTree.of(built)), "not handed over"
    bundle = cache.root / record.id
    shared = os.stat(bundle / "kiln_probe.py").st_ino == os.stat(built / "kiln_probe.py").st_ino
    result = await runner.run(
        request(BUNDLE_WRITE, params, language="python", bundle_path=bundle,
                arguments={"bundle": str(bundle)})
    )  # fmt: skip
    unchanged = (bundle / "kiln_probe.py").read_text() == source
    return {"bundle_write": summary(result), "shares_inode": shared, "unchanged": unchanged,
            "mode": oct(os.stat(bundle / "kiln_probe.py").st_mode & 0o777)}  # fmt: skip


# Finds kiln_tools beside it, then tries to change its own copy and the server's source.
HELPER_TAMPER = r"""
import json, os, sys
import kiln_tools
args = json.load(sys.stdin)
here = os.path.dirname(os.path.abspath(__file__))
found = os.path.dirname(os.path.abspath(kiln_tools.__file__))
out = {"found": found == os.path.join(here, "kiln_tools")}
def attempt(name, path):
    try:
        with open(path, "a") as f:
            f.write("\nraise SystemExit('tampered')\n")
        out[name] = "done"
    except OSError as e:
        out[name] = type(e).__name__
attempt("its own copy", os.path.join(here, "kiln_tools", "__init__.py"))
attempt("the server's source", args["source"])
attempt("the server's node source", args["node_source"])
print(json.dumps(out))
"""
# A later run, of another tool: calls through its own kiln_tools and says what it holds.
HELPER_PY = r"""
import hashlib, json, os
from kiln_tools import tools
here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kiln_tools")
def digest(name):
    with open(os.path.join(here, name), "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()
held = {name: digest(name) for name in os.listdir(here)}
print(json.dumps({"value": tools.fx_rate(from_="GBP"), "files": held}))
"""
HELPER_NODE = r"""
const crypto = require('node:crypto'), fs = require('node:fs'), path = require('node:path');
const { tools } = require('./kiln_tools');
const here = path.join(__dirname, 'kiln_tools');
const files = {};
for (const n of fs.readdirSync(here)) {
  files[n] = crypto.createHash('sha256').update(fs.readFileSync(path.join(here, n))).digest('hex');
}
console.log(JSON.stringify({value: tools.fx_rate({from: 'GBP'}), files}));
"""


async def helper(runner: Runner, params: dict[str, Any]) -> dict[str, Any]:
    """kiln_tools in every run: one run tries to change it, later runs of others use theirs."""
    from kiln.runner import kiln_tools
    from kiln.runner.kiln_tools import call_key

    where = Path(kiln_tools.__file__).parent  # the source every run's copy is made from
    args = {"source": str(where / "__init__.py"), "node_source": str(where / "index.js")}
    tamper = await runner.run(request(HELPER_TAMPER, params, language="python", arguments=args))
    answer = {"content": [{"type": "text", "text": "1.5"}], "isError": False}
    answers = {call_key(1, "fx_rate", {"from": "GBP"}): answer}
    later = {
        language: await runner.run(
            request(code, params, language=language, answers=answers, calls=("fx_rate",))
        )
        for language, code in (("python", HELPER_PY), ("node", HELPER_NODE))
    }
    return {"tamper": summary(tamper), **{lang: summary(result) for lang, result in later.items()}}


SCENARIOS: dict[str, Callable[[Runner, dict[str, Any]], Awaitable[dict[str, Any]]]] = {
    "neighbours": neighbours,
    "server_secrets": server_secrets,
    "escape": escape,
    "fill": fill,
    "litter": litter,
    "reach": reach,
    "standby": standby,
    "sockets": sockets,
    "abandoned": abandoned,
    "bundle_write": bundle_write,
    "thread_daemon": thread_daemon,
    "helper": helper,
}


async def main(name: str, params: dict[str, Any]) -> dict[str, Any]:
    runner = Runner(settings(params))
    try:
        report = await SCENARIOS[name](runner, params)
        started = time.monotonic()
        after = await runner.run(request("print('normal')", params, language="python"))
        report["next_call"] = contract_text(after)
        report["next_call_s"] = round(time.monotonic() - started, 3)
        report["helper_after"] = runner.helper_pid
        return report
    finally:
        runner.close()


if __name__ == "__main__":
    # Parameters (secrets among them) come on stdin: a command line is readable by anyone.
    print(json.dumps(asyncio.run(main(sys.argv[1], json.loads(sys.stdin.read())))))
