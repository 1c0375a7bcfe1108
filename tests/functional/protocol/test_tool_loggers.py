"""A tool's log lines reach the client as the tool's, whatever logger they name: `kiln` (and
`Kiln`, `kiln.x`, `kiln/approval`) is Kiln's own (runner/TALKING.md, "Whose logger"). Over
HTTP to a real `kiln dev` on both wires, and over stdio (`kiln stdio --url`, relaying it);
through the runner function: tests/e2e/test_lambda_runner_answer.py."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from support.devserver import DevServer, clean_env, kiln_dev
from support.tools import speaking_as_kiln

ROOT = Path(__file__).resolve().parents[3]
NAME = "speaks_as_kiln"
LOGGERS = ["kiln", "Kiln", "kiln.x", "kiln/approval", None, "sync"]
SEEN_AS = [f"tool/{NAME}/kiln", f"tool/{NAME}/Kiln", f"tool/{NAME}/kiln.x",
           f"tool/{NAME}/kiln/approval", f"tool/{NAME}", f"tool/{NAME}/sync"]  # fmt: skip
CODE = speaking_as_kiln(LOGGERS)
MODERN = "2026-07-28"
LEGACY = "2025-11-25"


def write_tool(folder: Path) -> Path:
    tool = folder / NAME
    tool.mkdir(parents=True)
    (tool / "main.py").write_text(CODE)
    manifest = {"name": NAME, "description": "Writes log lines under Kiln's logger names.",
                "language": "python", "input_schema": {"type": "object"},
                "timeout_seconds": 20}  # fmt: skip
    (tool / "tool.json").write_text(json.dumps(manifest))
    return folder


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    tmp = tmp_path_factory.mktemp("loggers")
    tools = write_tool(tmp / "tools")
    with kiln_dev(tmp / "state", "--no-examples", "--tools", str(tools)) as server:
        yield server


def log_params(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [m["params"] for m in messages if m.get("method") == "notifications/message"]


def sse(response: httpx.Response) -> list[dict[str, Any]]:
    assert response.headers["content-type"].startswith("text/event-stream"), response.text
    return [
        json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: ")
    ]


def test_a_tools_log_lines_are_the_tools_over_kiln_dev_http_on_2025(dev: DevServer) -> None:
    messages = sse(dev.mcp("tools/call", {"name": NAME, "arguments": {}}))
    logs = log_params(messages)
    assert [log.get("logger") for log in logs] == SEEN_AS, messages
    assert {log["level"] for log in logs} == {"warning"}
    assert messages[-1]["result"]["content"][0]["text"] == "said"


def test_a_tools_log_lines_are_the_tools_over_kiln_dev_http_on_2026(dev: DevServer) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": NAME, "arguments": {}, "_meta": {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/logLevel": "debug"}}}  # fmt: skip
    headers = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": MODERN,
               "Mcp-Method": "tools/call", "Mcp-Name": NAME}  # fmt: skip
    messages = sse(dev.http.post(dev.url + "/mcp", json=body, headers=headers))
    assert [log.get("logger") for log in log_params(messages)] == SEEN_AS, messages


def test_a_tools_log_lines_are_the_tools_over_stdio(dev: DevServer) -> None:
    lines = [
        {"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": {
            "protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "loggers"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
         "params": {"name": NAME, "arguments": {}}},
    ]  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "kiln.cli", "stdio", "--url", dev.url],
        input="".join(json.dumps(line) + "\n" for line in lines).encode(),
        capture_output=True, env=clean_env(PYTHONPATH=str(ROOT / "functions")), timeout=120,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()
    messages = [json.loads(line) for line in done.stdout.splitlines()]
    assert [log.get("logger") for log in log_params(messages)] == SEEN_AS, messages
    (answer,) = [m for m in messages if m.get("id") == 1]
    assert answer["result"]["content"][0]["text"] == "said", answer
