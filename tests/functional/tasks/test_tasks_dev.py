"""MCP tasks on `kiln dev` as a user runs it: a worker killed mid-run leaves its task failed."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from support.devserver import Served, serving

EXT = "io.modelcontextprotocol/tasks"
TREE = """
import json, os, subprocess, sys, time
args = json.load(sys.stdin)
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
with open(args["pids"], "w") as f:
    f.write(f"{os.getpid()} {child.pid}")
time.sleep(args["seconds"])
print("done")
"""


@contextmanager
def kiln_dev(state: Path, tools: Path, shared: Path) -> Iterator[Served]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "KILN_"))}
    env["KILN_RUN_SHARED_DIRS"] = str(shared)  # runs have their own uid and /tmp
    lease = {
        "KILN_TASK_HEARTBEAT_S": "0.3",
        "KILN_TASK_LEASE_S": "3",
        "KILN_TASK_START_GRACE_S": "3",
    }
    env.update(lease)
    command = [sys.executable, "-m", "kiln.cli", "dev", "--port", "0"]
    command += ["--state-dir", str(state), "--tools", str(tools)]
    with serving(command, state / "dev.log", env=env, timeout_s=60) as served:
        yield served


def mirrored(state: Path) -> list[Path]:
    return [f for f in (state / "aws").rglob("*") if f.is_file()]  # the emulator's journal


def modern(port: int, method: str, params: dict[str, Any], name: str) -> dict[str, Any]:
    params = {
        **params,
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {"extensions": {EXT: {}}},
        },
    }
    answer = httpx.post(
        f"http://127.0.0.1:{port}/mcp",
        json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params},
        headers={"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": method, "Mcp-Name": name},
        timeout=30,
    )
    body: dict[str, Any] = answer.json()
    assert "result" in body, body
    result: dict[str, Any] = body["result"]
    return result


@pytest.mark.parametrize(
    ("stop", "why"),
    [
        (signal.SIGKILL, "lease ran out"),  # the worker pool dies with no chance to report
        (signal.SIGTERM, "The server stopped while this task ran"),  # a graceful stop
    ],
)
def test_stopping_kiln_dev_mid_run_leaves_the_task_failed_not_working(
    tmp_path: Path, stop: signal.Signals, why: str
) -> None:
    tools = tmp_path / "tools" / "tree"
    tools.mkdir(parents=True)
    (tools / "main.py").write_text(TREE)
    manifest = {"description": "Starts a child and sleeps.", "timeout_seconds": 300}
    manifest |= {"task": "optional", "input_schema": {"type": "object"}}
    (tools / "tool.json").write_text(json.dumps(manifest))
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    pids_file = shared / "pids"
    state = tmp_path / "state"
    pids: list[str] = []
    try:
        with kiln_dev(state, tools.parent, shared) as served:
            port, process = served.port, served.process
            arguments = {"pids": str(pids_file), "seconds": 120}
            created = modern(port, "tools/call", {"name": "tree", "arguments": arguments}, "tree")
            task_id = created["taskId"]
            deadline = time.monotonic() + 30
            while not (pids_file.exists() and pids_file.read_text().strip()):
                assert time.monotonic() < deadline, "the run did not start"
                time.sleep(0.1)
            pids = pids_file.read_text().split()
            # The emulator journals each write before answering it; check the record is on
            # disk, so what the kill loses is the worker, not the task record.
            while not any(task_id in f.read_text(errors="replace") for f in mirrored(state)):
                assert time.monotonic() < deadline, "the task record was never mirrored"
                time.sleep(0.1)
            process.send_signal(stop)
            process.wait(timeout=30)
        with kiln_dev(state, tools.parent, shared) as served:  # on another port, maybe
            port = served.port
            deadline = time.monotonic() + 30
            while True:
                task = modern(port, "tasks/get", {"taskId": task_id}, task_id)
                if task["status"] != "working":
                    break
                assert time.monotonic() < deadline, "the task stayed working"
                time.sleep(0.2)
        assert task["status"] == "failed"
        assert task["error"]["code"] == -32603
        assert why in task["error"]["message"]
        if stop == signal.SIGTERM:  # the run was stopped with the server: nothing is left
            deadline = time.monotonic() + 15
            while any(Path(f"/proc/{pid}").exists() for pid in pids):
                assert time.monotonic() < deadline, "the run's processes outlived kiln dev"
                time.sleep(0.1)
    finally:
        for pid in pids:  # whatever the killed server's run left behind
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid), signal.SIGKILL)
