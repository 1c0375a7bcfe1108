"""`kiln dev` as a user runs it, for functional tests: a real process on a free port."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

import kiln
from devproc import serving
from harness import free_port
from kiln.emulator import shared_endpoint

DEV_KEY = "dev-test-author-key-views"
MODERN = "2026-07-28"
LEGACY = "2025-11-25"


@dataclass
class DevServer:
    url: str
    state_dir: Path
    http: httpx.Client

    @property
    def env(self) -> dict[str, str]:
        """The environment in which boto3 talks to this server's emulator (its signing key)."""
        endpoint = shared_endpoint(self.state_dir / "aws")
        assert endpoint is not None, "kiln dev's emulator left no endpoint.json"
        return {**_clean_env(), "AWS_ENDPOINT_URL": endpoint.url, "KILN_TABLE": "kiln",
                "AWS_REGION": endpoint.region,
                "AWS_ACCESS_KEY_ID": endpoint.credentials.access_key_id,
                "AWS_SECRET_ACCESS_KEY": endpoint.credentials.secret_access_key}  # fmt: skip

    def kiln(self, *args: str) -> subprocess.CompletedProcess[str]:
        """Run the `kiln` command against this server, through its REST API (URL and key)."""
        env = {**_clean_env(), "KILN_URL": self.url, "KILN_AUTHOR_KEY": DEV_KEY}
        return subprocess.run(
            [sys.executable, "-m", "kiln.cli", *args],
            env=env, capture_output=True, text=True, timeout=120, check=False,
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


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "KILN_"))}


@contextmanager
def kiln_dev(
    state_dir: Path, *extra: str, env: Mapping[str, str] | None = None, port: int | None = None
) -> Iterator[DevServer]:
    port = port or free_port()
    command = [sys.executable, "-m", "kiln.cli", "dev", "--port", str(port), "--state-dir",
               str(state_dir), "--author-key", DEV_KEY, *extra]  # fmt: skip
    env_ = {**_clean_env(), **(env or {})}
    with serving(command, port, state_dir / "dev.log", env=env_), httpx.Client(timeout=120) as http:
        yield DevServer(f"http://127.0.0.1:{port}", state_dir, http)


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
    port: int | None = None,
) -> Iterator[DevServer]:
    """`kiln dev` as root ("root") or as an unprivileged user ("unprivileged": one uid for
    the server and every run, as on Lambda), its state under `base` (made 0755 here)."""
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
    port = port or free_port()
    functions = Path(kiln.__file__).resolve().parents[1]
    packages = sysconfig.get_paths()["purelib"]
    command = ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups",
               str(SYSTEM_PYTHON), "-m", "kiln.cli", "dev", "--port", str(port), "--state-dir",
               str(base / "state"), "--author-key", DEV_KEY, *extra]  # fmt: skip
    env_ = {**_clean_env(), "HOME": str(base / "home"), "TMPDIR": str(base / "tmp"),
            "PYTHONPATH": f"{functions}:{packages}", **(env or {})}  # fmt: skip
    with serving(command, port, base / "dev.log", env=env_), httpx.Client(timeout=120) as http:
        yield DevServer(f"http://127.0.0.1:{port}", base / "state", http)
