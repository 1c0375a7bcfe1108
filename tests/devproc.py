"""`kiln dev` as a real child process, for tests and benchmarks that kill or measure it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

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
    state_dir: Path, port: int, *extra: str, timeout_s: float = 60, user: int | None = None
) -> DevProcess:
    """Start `kiln dev` (as `user`, a uid, if given) and return once /api/health answers."""
    env = clean_env()
    python = sys.executable
    if user is not None:
        env["HOME"] = str(state_dir.parent)
        python, path = python_for_others()
        env["PYTHONPATH"] = path
    state_dir.parent.mkdir(parents=True, exist_ok=True)
    log = state_dir.parent / f"{state_dir.name}.dev.log"
    with log.open("ab") as sink:
        process = subprocess.Popen(
            [python, "-m", "kiln.cli.main", "dev", "--port", str(port), "--state-dir",
             str(state_dir), "--author-key", AUTHOR_KEY, "--no-examples", *extra],
            env=env, stdout=sink, stderr=subprocess.STDOUT, user=user, group=user,
            cwd=state_dir.parent,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        await_health(process, url, log, timeout_s)
    except AssertionError as error:
        stop(process)
        raise RuntimeError(str(error)) from None
    return DevProcess(process, url, log)


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without AWS or Kiln settings (a test's own shell may have some)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "KILN_"))}
    return {**env, **extra}


def await_health(
    process: subprocess.Popen[bytes], url: str, log: Path, timeout_s: float = 90.0
) -> None:
    """Return once `url`/api/health answers 200; fail with the log if it exits or never does."""
    deadline = time.monotonic() + timeout_s
    while True:
        assert process.poll() is None, f"kiln dev exited: {_tail(log)}"
        try:
            if httpx.get(url + "/api/health", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, f"no answer in {timeout_s:.0f} s: {_tail(log)}"
        time.sleep(0.05)


def stop(process: subprocess.Popen[bytes], timeout_s: float = 30.0) -> None:
    """SIGTERM, as a user's Ctrl-C or a service manager would; kill it if it hangs."""
    if process.poll() is None:
        process.terminate()
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@contextmanager
def serving(
    command: Sequence[str],
    port: int,
    log: Path,
    *,
    env: dict[str, str],
    errors: Path | None = None,
    cwd: Path | None = None,
    preexec_fn: Callable[[], Any] | None = None,
    timeout_s: float = 90.0,
) -> Iterator[subprocess.Popen[bytes]]:
    """Run a `kiln dev` command; yield it once it answers on `port`; stop it on the way out.

    Its output goes to `log` (stderr to `errors` if given)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out, (errors or log).open("ab") as err:
        process = subprocess.Popen(
            list(command), env=env, cwd=cwd, stdout=out,
            stderr=err if errors else subprocess.STDOUT, preexec_fn=preexec_fn,
        )  # fmt: skip
    try:
        await_health(process, f"http://127.0.0.1:{port}", errors or log, timeout_s)
        yield process
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
    functions = Path(__file__).resolve().parents[1] / "functions"
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
