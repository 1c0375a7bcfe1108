"""`kiln dev` as a user runs it, for functional tests: a real process on a free port."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from devproc import serving
from harness import free_port
from kiln.local.emulator import shared_endpoint

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
            [sys.executable, "-m", "kiln.cli.main", *args],
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
    state_dir: Path, *extra: str, env: Mapping[str, str] | None = None
) -> Iterator[DevServer]:
    port = free_port()
    command = [sys.executable, "-m", "kiln.cli.main", "dev", "--port", str(port), "--state-dir",
               str(state_dir), "--author-key", DEV_KEY, *extra]  # fmt: skip
    env_ = {**_clean_env(), **(env or {})}
    with serving(command, port, state_dir / "dev.log", env=env_), httpx.Client(timeout=120) as http:
        yield DevServer(f"http://127.0.0.1:{port}", state_dir, http)
