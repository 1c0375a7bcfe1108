"""The Landlock fence, entered by a real child process: what it may and may not reach."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from kiln.runner import landlock

pytestmark = pytest.mark.skipif(landlock.abi() == 0, reason="this kernel has no Landlock")

CHILD = r"""
import json, os, socket, sys
from kiln.runner import landlock
given = json.loads(sys.argv[1])
built = landlock.fence(given["read_only"], given["read_write"], given["tcp_ports"],
                       files=given["files"])
out = {"enforced": built[1] if built else None}
if built:
    landlock.enter(built[0])
def attempt(name, action):
    try:
        action()
        out[name] = "done"
    except OSError as error:
        out[name] = type(error).__name__
attempt("read given", lambda: open(given["readable"]).read())
attempt("write read-only", lambda: open(given["readable"], "a"))
attempt("write given", lambda: open(os.path.join(given["read_write"][0], "new"), "w"))
attempt("read other", lambda: open(given["other"]).read())
attempt("list other", lambda: os.listdir(os.path.dirname(given["other"])))
attempt("connect", lambda: socket.create_connection(("127.0.0.1", given["port"]), 2).close())
attempt("signal parent", lambda: os.kill(os.getppid(), 0))
print(json.dumps(out))
"""


def run_fenced(
    tmp_path: Path, *, files: bool, tcp_ports: list[int] | None, allow_listener: bool = False
) -> dict[str, str]:
    readable, writable, other = (tmp_path / name for name in ("ro", "rw", "other"))
    for folder in (readable, writable, other):
        folder.mkdir()
    (readable / "file.txt").write_text("ok")
    (other / "secret.txt").write_text("secret")
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        if allow_listener and tcp_ports is not None:
            tcp_ports = [*tcp_ports, port]
        given = {
            "read_only": [str(readable), *sys.path[1:]],  # the interpreter and kiln
            "read_write": [str(writable)],
            "tcp_ports": tcp_ports,
            "files": files,
            "readable": str(readable / "file.txt"),
            "other": str(other / "secret.txt"),
            "port": port,
        }
        done = subprocess.run(
            [sys.executable, "-c", CHILD, json.dumps(given)],
            capture_output=True, text=True, check=True, timeout=60,
            env={"PYTHONPATH": os.pathsep.join(sys.path[1:])},
        )  # fmt: skip
    report: dict[str, str] = json.loads(done.stdout)
    return report


def test_a_fenced_process_reaches_only_what_it_was_given(tmp_path: Path) -> None:
    report = run_fenced(tmp_path, files=True, tcp_ports=[443])
    assert report["read given"] == "done"
    assert report["write given"] == "done"
    assert report["write read-only"] == "PermissionError"
    assert report["read other"] == "PermissionError"
    assert report["list other"] == "PermissionError"
    assert report["enforced"].startswith(f"landlock/{landlock.abi()}:files")
    if landlock.abi() >= 4:
        assert report["connect"] == "PermissionError"
        assert "+tcp" in report["enforced"]
    if landlock.abi() >= 6:
        assert report["signal parent"] == "PermissionError"
        assert report["enforced"].endswith("+signals")


def test_a_network_only_fence_leaves_files_to_other_means(tmp_path: Path) -> None:
    if landlock.abi() < 4:
        pytest.skip("TCP rules need Landlock ABI 4")
    port_free = run_fenced(tmp_path, files=False, tcp_ports=[443])
    assert port_free["read other"] == "done"
    assert port_free["connect"] == "PermissionError"
    assert not port_free["enforced"].split(":")[1].startswith("files")


def test_a_listed_port_stays_reachable(tmp_path: Path) -> None:
    if landlock.abi() < 4:
        pytest.skip("TCP rules need Landlock ABI 4")
    report = run_fenced(tmp_path, files=True, tcp_ports=[443], allow_listener=True)
    assert report["connect"] == "done"
    assert report["read other"] == "PermissionError"


def test_the_handled_rights_grow_with_the_kernels_abi() -> None:
    assert landlock.handled_fs(1) == landlock.ALL_ABI1
    assert landlock.handled_fs(2) & landlock.REFER
    assert not landlock.handled_fs(2) & landlock.TRUNCATE
    assert landlock.handled_fs(7) & landlock.TRUNCATE
