"""`kiln stdio` as a desktop client launches it: a real process, JSON-RPC lines on its pipes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def run_stdio(tmp_path: Path, lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "KILN_"))}
    process = subprocess.run(
        [
            sys.executable,
            "-m",
            "kiln.cli",
            "stdio",
            "--no-examples",
            "--tools",
            str(ROOT / "examples" / "conformance"),
            "--state-dir",
            str(tmp_path / ".kiln"),
        ],
        input="".join(json.dumps(line) + "\n" for line in lines),
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert process.returncode == 0, process.stderr
    return [json.loads(line) for line in process.stdout.splitlines()]


def test_kiln_stdio_initializes_lists_and_calls_a_fixture_tool(tmp_path: Path) -> None:
    replies = run_stdio(
        tmp_path,
        [
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "desktop", "version": "1"},
                },
            },
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
            {
                "jsonrpc": "2.0",
                "id": 3,
                "method": "tools/call",
                "params": {"name": "test_image_content", "arguments": {}},
            },
            {"jsonrpc": "2.0", "id": 4, "method": "ping"},
        ],
    )
    by_id = {reply["id"]: reply for reply in replies}
    assert set(by_id) == {1, 2, 3, 4}
    assert by_id[1]["result"]["protocolVersion"] == "2025-06-18"
    names = {tool["name"] for tool in by_id[2]["result"]["tools"]}
    assert "test_simple_text" in names
    assert by_id[3]["result"]["content"][0]["type"] == "image"
    assert by_id[4]["result"] == {}


def test_kiln_stdio_serves_a_modern_request(tmp_path: Path) -> None:
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    replies = run_stdio(
        tmp_path,
        [{"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": meta}}],
    )
    assert replies[0]["result"]["supportedVersions"] == ["2026-07-28"]
