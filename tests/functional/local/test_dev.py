"""`kiln dev` as a user runs it: a real process, a real port, state that survives a restart."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import httpx

from kiln.local.state import running_server
from support.devserver import DevServer, clean_env, on_a_free_port, serving
from support.devserver import kiln_dev as kiln_dev_on

KEY = "dev-test-author-key"


@contextmanager
def kiln_dev(state_dir: Path, *extra: str) -> Iterator[str]:
    """`kiln dev` on a port of its choosing; yields the URL it announced."""
    command = [sys.executable, "-m", "kiln.cli", "dev", "--port", "0",
               "--state-dir", str(state_dir), "--author-key", KEY, *extra]  # fmt: skip
    with serving(command, state_dir / "dev.log", env=clean_env(), timeout_s=60) as served:
        yield served.url


def test_a_tool_created_through_the_api_survives_a_restart(tmp_path: Path) -> None:
    tool = {"name": "kept", "description": "d", "language": "python", "code": "print(1)\n"}
    auth = {"Authorization": f"Bearer {KEY}"}
    with kiln_dev(tmp_path, "--no-examples") as url:
        created = httpx.post(url + "/api/tools", json=tool, headers=auth)
        assert created.status_code == 201, created.text
    with kiln_dev(tmp_path, "--no-examples") as url:
        again = httpx.get(url + "/api/tools/kept", headers=auth)
        assert again.status_code == 200
        assert again.json()["code"] == tool["code"]


def test_on_port_0_kiln_dev_serves_on_a_free_port_and_says_which(tmp_path: Path) -> None:
    """What every test here starts it with: no moment between choosing a port and binding it
    in which another process could take it."""
    with kiln_dev(tmp_path / "state", "--no-examples") as url:
        port = int(url.rsplit(":", 1)[1])
        assert port != 0
        assert running_server(tmp_path / "state") == url  # where `kiln` commands find it
        assert httpx.get(url + "/api/health").json()["ok"] is True


def test_a_server_that_must_know_its_port_first_gets_another_when_one_is_taken(
    tmp_path: Path,
) -> None:
    """The race `on_a_free_port` is for, made certain: another program takes the first
    port between its choice and kiln dev's bind."""
    squatters: list[socket.socket] = []

    def start(port: int) -> AbstractContextManager[DevServer]:
        if not squatters:
            squatter = socket.socket()
            squatter.bind(("127.0.0.1", port))
            squatter.listen()
            squatters.append(squatter)
        return kiln_dev_on(tmp_path / "state", "--no-examples", port=port)

    try:
        with on_a_free_port(start) as server:
            assert server.url != f"http://127.0.0.1:{squatters[0].getsockname()[1]}"
            assert httpx.get(server.url + "/api/health").status_code == 200
        log = (tmp_path / "state" / "dev.log").read_text()
        assert "is already in use by another program" in log, log  # the first attempt
    finally:
        for squatter in squatters:
            squatter.close()


def test_examples_and_extra_tool_folders_are_loaded_and_unchanged_ones_untouched(
    tmp_path: Path,
) -> None:
    extra = tmp_path / "more" / "shout"
    extra.mkdir(parents=True)
    (extra / "tool.json").write_text('{"description": "Upper-case a text."}')
    (extra / "main.py").write_text("import sys\nprint(sys.stdin.read().upper())\n")
    with kiln_dev(tmp_path / "state", "--tools", str(tmp_path / "more")) as url:
        names = {t["name"]: t["revision"] for t in httpx.get(url + "/api/tools").json()["tools"]}
    assert {"add_vat", "shout"} <= set(names)
    with kiln_dev(tmp_path / "state", "--tools", str(tmp_path / "more")) as url:
        again = {t["name"]: t["revision"] for t in httpx.get(url + "/api/tools").json()["tools"]}
    assert again == names


def test_kiln_dev_lists_add_vat_and_calling_it_returns_the_seed_numbers(tmp_path: Path) -> None:
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    with kiln_dev(tmp_path) as url:
        listed = httpx.post(
            url + "/mcp", headers=headers, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
        ).json()
        called = httpx.post(
            url + "/mcp",
            headers=headers,
            json={
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": {"name": "add_vat", "arguments": {"net": 99.99}},
            },
        ).json()
    assert "add_vat" in {tool["name"] for tool in listed["result"]["tools"]}
    assert called["result"]["isError"] is False
    text = called["result"]["content"][0]["text"]
    assert '"gross": "119.99"' in text
    assert '"vat": "20.00"' in text


def dev_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "KILN_"))}


def test_changes_made_through_the_api_to_folder_tools_survive_a_restart(tmp_path: Path) -> None:
    folders = tmp_path / "tools"
    for name in ("one", "two", "three"):
        (folders / name).mkdir(parents=True)
        (folders / name / "tool.json").write_text('{"description": "Echo."}')
        (folders / name / "main.py").write_text(f"print({name!r})\n")
    auth = {"Authorization": f"Bearer {KEY}"}
    state = tmp_path / "state"
    args = ("--no-examples", "--tools", str(folders))
    with kiln_dev(state, *args) as url:
        one = httpx.get(url + "/api/tools/one", headers=auth).json()
        edited = {**one, "description": "Edited through the API."}
        put = httpx.put(url + "/api/tools/one", json=edited, headers={**auth, "If-Match": '"1"'})
        assert put.status_code == 200, put.text
        assert httpx.post(url + "/api/tools/two/disable", headers=auth).status_code == 200
        assert httpx.delete(url + "/api/tools/three", headers=auth).status_code == 200
    (folders / "two" / "main.py").write_text("print('two, edited on disk')\n")
    with kiln_dev(state, *args) as url:
        tools = {t["name"]: t for t in httpx.get(url + "/api/tools", headers=auth).json()["tools"]}
    assert tools["one"]["description"] == "Edited through the API."
    assert tools["one"]["revision"] == 2
    assert "three" not in tools  # deleted stays deleted
    assert tools["two"]["revision"] == 2  # its folder changed on disk, so it was updated


def test_a_second_kiln_dev_on_the_same_state_is_refused_and_kiln_stdio_shares_it(
    tmp_path: Path,
) -> None:
    auth = {"Authorization": f"Bearer {KEY}"}
    with kiln_dev(tmp_path, "--no-examples") as url:
        tool = {"name": "shared", "description": "d", "language": "python", "code": "print(7)\n"}
        assert httpx.post(url + "/api/tools", json=tool, headers=auth).status_code == 201
        second = subprocess.run(
            [
                sys.executable,
                "-m",
                "kiln.cli",
                "dev",
                "--port",
                "0",
                "--state-dir",
                str(tmp_path),
                "--no-examples",
            ],
            env=dev_env(),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert second.returncode == 1
        assert "in use by another kiln process" in second.stderr
        request = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "shared", "arguments": {}},
        }
        out = tmp_path / "stdio.out"
        with out.open("wb") as sink:  # a regular file, not a pipe
            stdio = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "kiln.cli",
                    "stdio",
                    "--state-dir",
                    str(tmp_path),
                    "--no-examples",
                ],
                input=(json.dumps(request) + "\n").encode(),
                env=dev_env(),
                stdout=sink,
                stderr=subprocess.PIPE,
                timeout=60,
                check=False,
            )
        assert stdio.returncode == 0, stdio.stderr
        answer = json.loads(out.read_text().splitlines()[0])
        assert answer["result"]["content"][0]["text"] == "7"


def test_stopping_kiln_dev_discards_its_standbys_and_leaves_no_run_behind(tmp_path: Path) -> None:
    """A call leaves a standby (a prepared run for the tool's next call) waiting; SIGTERM must
    take it with it: no process in a run directory, no run directory."""
    temp = tmp_path / "temp"
    temp.mkdir()
    command = [sys.executable, "-m", "kiln.cli", "dev", "--port", "0", "--state-dir",
               str(tmp_path / "state"), "--author-key", "standby-test-key"]  # fmt: skip
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "add_vat", "arguments": {"net": 10}}}  # fmt: skip
    with serving(command, tmp_path / "dev.log", env=clean_env(TMPDIR=str(temp))) as served:
        for _ in range(2):  # the second call starts from the standby the first one left
            answer = httpx.post(f"{served.url}/mcp", headers=headers, json=call)
            assert answer.json()["result"]["isError"] is False
        assert wait_until(lambda: len(runs_in(temp)) >= 1)  # the next call's, waiting
        assert wait_until(lambda: processes_inside(temp, "kiln-run-") != [])  # its script
    assert runs_in(temp) == []
    assert processes_inside(temp, "kiln-run-") == []


def runs_in(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("kiln-run-"))


def processes_inside(folder: Path, prefix: str) -> list[int]:
    """Live processes working in a directory `prefix`* of `folder` (a run's script does)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if str(entry.joinpath("cwd").resolve()).startswith(str(folder / prefix)):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def wait_until(condition: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True
