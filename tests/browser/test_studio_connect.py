"""Each connect snippet, copied off the Connect page, runs against `kiln dev` and lists the tools:
the Python SDK 2.x (`mcp`), the TypeScript SDK, and `kiln stdio --client-config` for desktop
clients, with and without the key header.

The SDKs are the current official clients, pinned as the yardsticks pin them and installed once
into the per-user cache (MCP_YARDSTICK_CACHE, default ~/.cache/mcp-yardsticks) from PyPI / npm.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from support.browser import Dev, sign_in

PY_SDK = "2.3.0"  # PyPI mcp
TS_SDK = "1.32.2"  # npm @modelcontextprotocol/sdk
CACHE = Path(os.environ.get("MCP_YARDSTICK_CACHE", Path.home() / ".cache" / "mcp-yardsticks"))
TOOL = "connect_probe"

pytestmark = pytest.mark.slow


def run(
    command: list[str],
    *,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    stdin: str | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command, cwd=cwd, env=env, input=stdin, capture_output=True, text=True,
        timeout=timeout, check=False,
    )  # fmt: skip


@pytest.fixture(scope="module")
def python_sdk() -> Path:
    venv = CACHE / f"py-mcp-{PY_SDK}"
    python = venv / "bin" / "python"
    if not python.exists():
        made = run([sys.executable, "-m", "venv", str(venv)])
        assert made.returncode == 0, made.stderr
        pip = run([str(python), "-m", "pip", "install", "-q", f"mcp=={PY_SDK}"], timeout=600)
        assert pip.returncode == 0, pip.stderr[-3000:]
    return python


@pytest.fixture(scope="module")
def ts_sdk() -> Path:
    folder = CACHE / f"ts-sdk-{TS_SDK}"
    if not (folder / "node_modules").is_dir():
        npm = shutil.which("npm")
        assert npm, "npm (with Node.js) is needed for the TypeScript SDK snippet"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "package.json").write_text('{"private": true}')
        package = f"@modelcontextprotocol/sdk@{TS_SDK}"
        done = run([npm, "install", "--no-audit", "--no-fund", package], cwd=folder, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
    return folder / "node_modules"


@pytest.fixture(scope="module")
def call_key(dev: Dev) -> str:
    body = {"name": TOOL, "description": "Lists.", "language": "python", "code": "print(1)\n"}
    made = dev.api("POST", "/api/tools", json=body)
    assert made.status_code == 201, made.text
    key = dev.api("POST", "/api/keys", json={"name": "connect-test", "scope": "call"})
    assert key.status_code == 201, key.text
    return str(key.json()["key"])


def snippet(page: Any, which: str, with_key: bool) -> str:
    sign_in(page)
    page.goto("/studio/#/connect")
    if with_key:
        page.get_by_role("checkbox", name="The server requires a key").check()
    text = str(page.locator(f"[data-snippet='{which}'] pre").inner_text())
    assert text.strip(), f"the {which} snippet is empty"
    return text


def environment(key: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KILN_")}
    return {**env, "KILN_KEY": key, "PATH": f"{Path(sys.executable).parent}:{env['PATH']}"}


@pytest.mark.parametrize("with_key", [False, True])
def test_the_python_snippet_lists_the_tools_with_the_python_sdk_2(
    page: Any, call_key: str, python_sdk: Path, tmp_path: Path, with_key: bool
) -> None:
    script = tmp_path / "list_tools.py"
    script.write_text(snippet(page, "python", with_key))
    done = run([str(python_sdk), str(script)], env=environment(call_key))
    assert done.returncode == 0, done.stderr[-3000:]
    assert TOOL in json.loads(done.stdout.replace("'", '"')), done.stdout


@pytest.mark.parametrize("with_key", [False, True])
def test_the_typescript_snippet_lists_the_tools_with_the_typescript_sdk(
    page: Any, call_key: str, ts_sdk: Path, tmp_path: Path, with_key: bool
) -> None:
    node = shutil.which("node")
    assert node, "node is needed for the TypeScript SDK snippet"
    (tmp_path / "node_modules").symlink_to(ts_sdk)  # bare imports resolve beside the script
    script = tmp_path / "list-tools.mjs"
    script.write_text(snippet(page, "typescript", with_key))
    done = run([node, str(script)], env=environment(call_key))
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"'{TOOL}'" in done.stdout, done.stdout


@pytest.mark.parametrize("with_key", [False, True])
def test_the_desktop_snippet_prints_an_entry_that_starts_a_kiln_stdio_listing_the_tools(
    page: Any, call_key: str, with_key: bool
) -> None:
    command = snippet(page, "desktop", with_key)
    assert command.startswith("kiln stdio --client-config"), command
    printed = run(["bash", "-c", command], env=environment(call_key))
    assert printed.returncode == 0, printed.stderr[-3000:]
    entry = json.loads(printed.stdout)["mcpServers"]["kiln"]
    assert ("--key" in entry["args"]) is with_key, entry
    lines = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "desktop-snippet-test", "version": "1"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}},
    ]  # fmt: skip
    stdin = "".join(json.dumps(line) + "\n" for line in lines)
    served = run([entry["command"], *entry["args"]], env=environment(call_key), stdin=stdin)
    answers = {a.get("id"): a for a in map(json.loads, served.stdout.splitlines())}
    assert 2 in answers, f"no tools/list answer; stderr: {served.stderr[-3000:]}"
    names = [tool["name"] for tool in answers[2]["result"]["tools"]]
    assert TOOL in names, names
