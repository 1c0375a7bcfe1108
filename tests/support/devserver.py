"""`kiln dev` as a process, for functional tests and benchmarks: started as a user runs it
(a real process, a private state directory), awaited, stopped.

It binds its port itself: `--port 0` takes a free one, with no moment in which another
process could take it first, and the URL it serves at is the one its first line announces
(`announced_url`). A test gives a port only to restart a server where it was.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx

import kiln
from kiln.local.emulator import shared_endpoint

from .app import MODERN, free_port

AUTHOR_KEY = "devproc-author-key-0123456789"


@dataclass
class DevProcess:
    process: subprocess.Popen[bytes]
    url: str
    log: Path

    def api(self, method: str, path: str, **kw: object) -> httpx.Response:
        headers = {"Authorization": f"Bearer {AUTHOR_KEY}", **dict(kw.pop("headers", {}) or {})}  # type: ignore[call-overload]
        return httpx.request(method, self.url + path, headers=headers, timeout=30, **kw)  # type: ignore[arg-type]

    def emulator_pid(self) -> int | None:
        """The emulator child's pid (the one child of kiln dev that runs kiln.local.emulator)."""
        for task in Path(f"/proc/{self.process.pid}/task").iterdir():
            for child in (task / "children").read_text().split():
                cmdline = Path(f"/proc/{child}/cmdline").read_bytes()
                if b"kiln.local.emulator" in cmdline:
                    return int(child)
        return None


def start_dev(
    state_dir: Path, port: int = 0, *extra: str, timeout_s: float = 60, user: int | None = None
) -> DevProcess:
    """Start `kiln dev` (as `user`, a uid, if given) and return once /api/health answers;
    on a port of its choosing unless given one (`DevProcess.url` says which)."""
    env = clean_env()
    python = sys.executable
    if user is not None:
        env["HOME"] = str(state_dir.parent)
        python, path = python_for_others()
        env["PYTHONPATH"] = path
    state_dir.parent.mkdir(parents=True, exist_ok=True)
    log = state_dir.parent / f"{state_dir.name}.dev.log"
    with log.open("ab") as sink:
        offset = sink.tell()
        process = subprocess.Popen(
            [python, "-m", "kiln.cli", "dev", "--port", str(port), "--state-dir",
             str(state_dir), "--author-key", AUTHOR_KEY, "--no-examples", *extra],
            env=env, stdout=sink, stderr=subprocess.STDOUT, user=user, group=user,
            cwd=state_dir.parent,
        )  # fmt: skip
    try:
        url = announced_url(process, log, offset, timeout_s)
    except AssertionError as error:
        stop(process)
        raise RuntimeError(str(error)) from None
    return DevProcess(process, url, log)


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without AWS or Kiln settings (a test's own shell may have some)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "KILN_"))}
    return {**env, **extra}


ANNOUNCED = re.compile(rb"Kiln is serving MCP at (http://[^/\s]+)/mcp")


def announced_url(
    process: subprocess.Popen[bytes],
    log: Path,
    offset: int = 0,
    timeout_s: float = 90.0,
    errors: Path | None = None,
) -> str:
    """The URL `kiln dev` announces in `log` (past `offset`: the log may hold earlier runs'),
    once /api/health answers 200 there; fail with its output if it exits or never does."""
    deadline = time.monotonic() + timeout_s
    url = None
    while True:
        assert process.poll() is None, f"kiln dev exited: {_tail(errors or log)}"
        url = url or _announced(log, offset)
        try:
            if url and httpx.get(url + "/api/health", timeout=1).status_code == 200:
                return url
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            said = f"no answer at {url}" if url else "no 'Kiln is serving MCP at' line"
            raise AssertionError(f"{said} in {timeout_s:.0f} s: {_tail(errors or log)}")
        time.sleep(0.05)


PORT_TAKEN = re.compile(r"port \d+ on \S+ is (already )?in use")  # kiln.local.preflight's words
T = TypeVar("T")


@contextmanager
def on_a_free_port(
    start: Callable[[int], AbstractContextManager[T]], attempts: int = 3
) -> Iterator[T]:
    """For a server that must know its port before it starts (its settings name it): a free
    port, and a fresh one if another process took it before the server could bind it, up to
    `attempts` times. Any other failure, or the last, is raised as it is."""
    for attempt in range(1, attempts + 1):
        with ExitStack() as stack:
            try:
                served = stack.enter_context(start(free_port()))
            except (AssertionError, RuntimeError) as error:
                if PORT_TAKEN.search(str(error)) and attempt < attempts:
                    continue
                raise
            yield served
            return


def _announced(log: Path, offset: int) -> str | None:
    with log.open("rb") as f:
        f.seek(offset)
        found = ANNOUNCED.search(f.read())
    return found.group(1).decode() if found else None


def stop(process: subprocess.Popen[bytes], timeout_s: float = 30.0) -> None:
    """SIGTERM, as a user's Ctrl-C or a service manager would; kill it if it hangs."""
    if process.poll() is None:
        process.terminate()
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@dataclass
class Served:
    process: subprocess.Popen[bytes]
    url: str  # where it said it serves: http://127.0.0.1:PORT

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])


@contextmanager
def serving(
    command: Sequence[str],
    log: Path,
    *,
    env: dict[str, str],
    errors: Path | None = None,
    cwd: Path | None = None,
    preexec_fn: Callable[[], Any] | None = None,
    timeout_s: float = 90.0,
) -> Iterator[Served]:
    """Run a `kiln dev` command (`--port 0`, or a port to restart on); yield it and the URL it
    announced once it answers there; stop it on the way out.

    Its output goes to `log` (stderr to `errors` if given)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out, (errors or log).open("ab") as err:
        offset = out.tell()
        process = subprocess.Popen(
            list(command), env=env, cwd=cwd, stdout=out,
            stderr=err if errors else subprocess.STDOUT, preexec_fn=preexec_fn,
        )  # fmt: skip
    try:
        yield Served(process, announced_url(process, log, offset, timeout_s, errors))
    finally:
        stop(process)


def _tail(log: Path) -> str:
    try:
        return log.read_text(errors="replace")[-3000:]
    except OSError:
        return "(no log)"


def python_for_others() -> tuple[str, str]:
    """An interpreter other users may run, and the PYTHONPATH that gives it Kiln.

    This interpreter may live under a home directory others cannot enter (pyenv in /root);
    the system's Python of the same minor version runs this venv's packages."""
    import sysconfig

    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for candidate in (sys.executable, f"/usr/bin/{version}", f"/usr/local/bin/{version}"):
        if _others_can_run(Path(candidate)):
            break
    else:
        raise RuntimeError(f"no {version} that other users can run")
    functions = Path(__file__).resolve().parents[2] / "functions"
    return candidate, os.pathsep.join([sysconfig.get_paths()["purelib"], str(functions)])


def _others_can_run(path: Path) -> bool:
    try:
        real = path.resolve(strict=True)
    except OSError:
        return False
    for part in [*reversed(real.parents), real]:
        mode = part.stat().st_mode
        if not mode & 0o001:
            return False
    return True


def stop_dev(dev: DevProcess) -> None:
    stop(dev.process, timeout_s=20)


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


DEV_KEY = "dev-test-author-key-views"
LEGACY = "2025-11-25"


@dataclass
class DevServer:
    url: str
    state_dir: Path
    http: httpx.Client
    process: subprocess.Popen[bytes] | None = None  # to stop it as a test chooses
    log: Path | None = None

    @property
    def env(self) -> dict[str, str]:
        """The environment in which boto3 talks to this server's emulator (its signing key)."""
        endpoint = shared_endpoint(self.state_dir / "aws")
        assert endpoint is not None, "kiln dev's emulator left no endpoint.json"
        return {**clean_env(), "AWS_ENDPOINT_URL": endpoint.url, "KILN_TABLE": "kiln",
                "AWS_REGION": endpoint.region,
                "AWS_ACCESS_KEY_ID": endpoint.credentials.access_key_id,
                "AWS_SECRET_ACCESS_KEY": endpoint.credentials.secret_access_key}  # fmt: skip

    def kiln(
        self, *args: str, env: Mapping[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run the `kiln` command against this server, through its REST API (URL and key)."""
        base = {**clean_env(), "KILN_URL": self.url, "KILN_AUTHOR_KEY": DEV_KEY}
        return subprocess.run(
            [sys.executable, "-m", "kiln.cli", *args],
            env={**base, **(env or {})}, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip

    def create_key(self, name: str, *flags: str) -> str:
        done = self.kiln("keys", "create", "--name", name, "--scope", "call", *flags)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    def api(self, method: str, path: str, **kw: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {DEV_KEY}", **kw.pop("headers", {})}
        return self.http.request(method, self.url + path, headers=headers, **kw)

    def mcp(
        self,
        method: str,
        params: Mapping[str, Any] | None = None,
        *,
        wire: str = "legacy",
        key: str | None = None,
        path: str = "/mcp",
        rid: Any = 1,
    ) -> httpx.Response:
        """One MCP request on the legacy (2025-11-25) or the modern (2026-07-28) wire."""
        body: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method,
                                "params": dict(params or {})}  # fmt: skip
        headers = {"Content-Type": "application/json",
                   "Accept": "application/json, text/event-stream"}  # fmt: skip
        if wire == "modern":
            body["params"]["_meta"] = {
                "io.modelcontextprotocol/protocolVersion": MODERN,
                "io.modelcontextprotocol/clientCapabilities": {},
                "io.modelcontextprotocol/clientInfo": {"name": "views-test"},
            }
            headers.update({"MCP-Protocol-Version": MODERN, "Mcp-Method": method})
            if method == "tools/call":
                headers["Mcp-Name"] = str(body["params"]["name"])
        else:
            headers["MCP-Protocol-Version"] = LEGACY
        if key is not None:
            headers["Authorization"] = f"Bearer {key}"
        return self.http.post(self.url + path, json=body, headers=headers)


@contextmanager
def kiln_dev(
    state_dir: Path, *extra: str, env: Mapping[str, str] | None = None, port: int = 0
) -> Iterator[DevServer]:
    command = [sys.executable, "-m", "kiln.cli", "dev", "--port", str(port), "--state-dir",
               str(state_dir), "--author-key", DEV_KEY, *extra]  # fmt: skip
    env_ = {**clean_env(), **(env or {})}
    with (
        serving(command, state_dir / "dev.log", env=env_) as served,
        httpx.Client(timeout=120) as http,
    ):
        yield DevServer(served.url, state_dir, http, served.process, state_dir / "dev.log")


UNPRIVILEGED_USER = "kiln-hostile-test"  # the hostile-tool tests' account, too
SYSTEM_PYTHON = Path("/usr/bin/python3")  # the user cannot reach a Python under /root


def unprivileged_user() -> tuple[int, int]:
    """(uid, gid) of an unprivileged account, created if missing; skips unless root."""
    import pwd

    import pytest

    if os.geteuid() != 0:
        pytest.skip("needs root: to run kiln dev both as root and as another user")
    if not shutil.which("setpriv") or not SYSTEM_PYTHON.exists():
        pytest.skip("needs setpriv and /usr/bin/python3 to run kiln dev as another user")
    if subprocess.run([str(SYSTEM_PYTHON), "-c", "import sys; print(sys.version_info[:2])"],
                      capture_output=True, text=True, check=False).stdout.strip() != str(
        sys.version_info[:2]
    ):  # fmt: skip
        pytest.skip("/usr/bin/python3 is not this Python's version: it cannot load its packages")
    try:
        entry = pwd.getpwnam(UNPRIVILEGED_USER)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin",
             UNPRIVILEGED_USER],
            check=True, capture_output=True,
        )  # fmt: skip
        entry = pwd.getpwnam(UNPRIVILEGED_USER)
    return entry.pw_uid, entry.pw_gid


@contextmanager
def kiln_dev_as(
    uid_model: str,
    base: Path,
    *extra: str,
    env: Mapping[str, str] | None = None,
    port: int = 0,
) -> Iterator[DevServer]:
    """`kiln dev` as root ("root") or as an unprivileged user ("unprivileged": one uid for
    the server and every run, as on Lambda, fenced by Landlock where the kernel has it;
    "unfenced": the same where the kernel refuses Landlock), its state under `base` (made
    0755 here)."""
    base.mkdir(parents=True, exist_ok=True)
    base.chmod(0o755)
    if uid_model == "root":
        with kiln_dev(base / "state", *extra, env=env, port=port) as server:
            yield server
        return
    uid, gid = unprivileged_user()
    for place in ("state", "home", "tmp"):  # its temporary files too: removed with `base`
        (base / place).mkdir(exist_ok=True)
        os.chown(base / place, uid, gid)
    functions = Path(kiln.__file__).resolve().parents[1]
    packages = sysconfig.get_paths()["purelib"]
    command = ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups",
               str(SYSTEM_PYTHON), "-m", "kiln.cli", "dev", "--port", str(port), "--state-dir",
               str(base / "state"), "--author-key", DEV_KEY, *extra]  # fmt: skip
    env_ = {**clean_env(), "HOME": str(base / "home"), "TMPDIR": str(base / "tmp"),
            "PYTHONPATH": f"{functions}:{packages}", **(env or {})}  # fmt: skip
    refuse = refuse_landlock if uid_model == "unfenced" else None
    with (
        serving(command, base / "dev.log", env=env_, preexec_fn=refuse) as served,
        httpx.Client(timeout=120) as http,
    ):
        yield DevServer(served.url, base / "state", http, served.process, base / "dev.log")


def refuse_landlock() -> None:
    """In a child before it execs: every landlock_* system call fails with EPERM, as on a
    kernel without Landlock, for it and all it starts (a seccomp filter; needs root)."""
    import ctypes

    from kiln.runner import contain

    numbers = (444, 445, 446)  # landlock_create_ruleset, _add_rule, _restrict_self (both ABIs)
    eperm = 0x00050000 | 1
    program = [(0x20, 0, 0, 0)]  # load the system call's number
    for number in numbers:
        program += [(0x15, 0, 1, number), (0x06, 0, 0, eperm)]
    program.append((0x06, 0, 0, 0x7FFF0000))  # allow everything else
    filters = (contain._SockFilter * len(program))(*(contain._SockFilter(*i) for i in program))
    fprog = contain._SockFprog(len(program), filters)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(contain.PR_SET_SECCOMP, contain.SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0):
        raise OSError(ctypes.get_errno(), "cannot refuse Landlock")


def stdio_call(url: str, key: str, name: str, arguments: Mapping[str, Any] | None = None) -> Any:
    """One tools/call through the `kiln stdio --url URL --key KEY` bridge (initialize first),
    as a client on stdio would make it: the call's JSON-RPC answer."""
    import json

    lines = [
        {"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "c"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
         "params": {"name": name, "arguments": dict(arguments or {})}},
    ]  # fmt: skip
    ran = subprocess.run(
        [sys.executable, "-m", "kiln.cli", "stdio", "--url", url, "--key", key],
        input="".join(json.dumps(line) + "\n" for line in lines).encode(),
        capture_output=True, env=clean_env(), timeout=120, check=False,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr.decode()
    (answer,) = [m for m in map(json.loads, ran.stdout.splitlines()) if m.get("id") == 1]
    return answer
