"""`kiln dev` as a real child process, for tests and benchmarks that kill or measure it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

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
        """The emulator child's pid (the one child of kiln dev that runs kiln.emulator)."""
        for task in Path(f"/proc/{self.process.pid}/task").iterdir():
            for child in (task / "children").read_text().split():
                cmdline = Path(f"/proc/{child}/cmdline").read_bytes()
                if b"kiln.emulator" in cmdline:
                    return int(child)
        return None


def start_dev(
    state_dir: Path, port: int, *extra: str, timeout_s: float = 60, user: int | None = None
) -> DevProcess:
    """Start `kiln dev` (as `user`, a uid, if given) and return once /api/health answers."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "KILN_"))}
    python = sys.executable
    if user is not None:
        env["HOME"] = str(state_dir.parent)
        python, path = python_for_others()
        env["PYTHONPATH"] = path
    state_dir.parent.mkdir(parents=True, exist_ok=True)
    log = state_dir.parent / f"{state_dir.name}.dev.log"
    with log.open("ab") as sink:
        process = subprocess.Popen(
            [python, "-m", "kiln.cli", "dev", "--port", str(port), "--state-dir",
             str(state_dir), "--author-key", AUTHOR_KEY, "--no-examples", *extra],
            env=env, stdout=sink, stderr=subprocess.STDOUT, user=user, group=user,
            cwd=state_dir.parent,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout_s
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"kiln dev exited: {log.read_text(errors='replace')[-2000:]}")
        try:
            if httpx.get(url + "/api/health", timeout=1).status_code == 200:
                return DevProcess(process, url, log)
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            process.kill()
            raise RuntimeError("kiln dev did not start in time")
        time.sleep(0.05)


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
    dev.process.terminate()
    try:
        dev.process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        dev.process.kill()
        dev.process.wait()


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0
