"""`kiln tools push | pull | list | call` as a user runs them, against a real server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from support.app import AUTHOR_KEY, RunningKiln


def kiln(server: RunningKiln, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KILN_")}
    env["KILN_URL"] = server.url
    env["KILN_AUTHOR_KEY"] = AUTHOR_KEY
    return subprocess.run(
        [sys.executable, "-m", "kiln.cli", "tools", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def make_tool(root: Path, name: str, code: str, description: str = "A test tool.") -> Path:
    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    manifest = {
        "description": description,
        "input_schema": {"type": "object", "properties": {"x": {"type": "integer"}}},
    }
    (folder / "tool.json").write_text(json.dumps(manifest))
    (folder / "main.py").write_text(code)
    return folder


def test_push_creates_then_updates_only_what_changed(
    kiln_server: RunningKiln, tmp_path: Path
) -> None:
    make_tool(tmp_path, "alpha", "print('a')\n")
    make_tool(tmp_path, "beta", "print('b')\n")
    first = kiln(kiln_server, "push", str(tmp_path))
    assert first.returncode == 0, first.stderr
    assert first.stdout.split() == ["created", "alpha", "created", "beta"]

    make_tool(tmp_path, "beta", "print('b2')\n")
    second = kiln(kiln_server, "push", str(tmp_path))
    assert second.stdout.split() == ["unchanged", "alpha", "updated", "beta"]
    revisions = {
        t["name"]: t["revision"] for t in kiln_server.api("GET", "/api/tools").json()["tools"]
    }
    assert revisions == {"alpha": 1, "beta": 2}


def test_a_push_waits_for_packages_and_shows_a_failed_build_with_its_log_keeping_the_tool(
    kiln_server: RunningKiln, tmp_path: Path
) -> None:
    folder = make_tool(tmp_path, "broken", "print('never runs')\n")
    manifest = json.loads((folder / "tool.json").read_text())
    manifest["requirements"] = ["kiln-no-such-package-9f1c==1.0"]
    (folder / "tool.json").write_text(json.dumps(manifest))
    done = kiln(kiln_server, "push", str(tmp_path))
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert done.stdout.split() == ["created", "broken"], done.stdout
    said = done.stderr
    saved = "broken was saved (revision 1), but its packages (kiln-no-such-package-9f1c==1.0)"
    assert f"{saved} failed to build" in said, said
    log = said.partition("--- build log ---\n")[2]
    assert "\n# installer: " in log, said  # the build's own log
    assert "kiln-no-such-package-9f1c" in log, said
    shown = kiln_server.api("GET", "/api/tools/broken").json()
    assert (shown["revision"], shown["bundle"]["status"]) == (1, "failed"), shown
    assert f"kiln bundles retry {shown['bundle']['id']}" in said, said


def test_a_bad_folder_stops_the_push_before_anything_is_written(
    kiln_server: RunningKiln, tmp_path: Path
) -> None:
    make_tool(tmp_path, "good", "print('ok')\n")
    make_tool(tmp_path, "9bad", "print('x')\n")
    done = kiln(kiln_server, "push", str(tmp_path))
    assert done.returncode == 1
    assert "9bad" in done.stderr
    assert "name" in done.stderr
    assert kiln_server.api("GET", "/api/tools").json()["tools"] == []


def test_pull_writes_folders_that_push_back_unchanged(
    kiln_server: RunningKiln, tmp_path: Path
) -> None:
    make_tool(tmp_path / "src", "gamma", "import json, sys\nprint(json.load(sys.stdin))\n")
    assert kiln(kiln_server, "push", str(tmp_path / "src")).returncode == 0
    pulled = kiln(kiln_server, "pull", str(tmp_path / "out"))
    assert pulled.returncode == 0, pulled.stderr
    assert (tmp_path / "out" / "gamma" / "main.py").read_text() == (
        tmp_path / "src" / "gamma" / "main.py"
    ).read_text()
    again = kiln(kiln_server, "push", str(tmp_path / "out"))
    assert again.stdout.split() == ["unchanged", "gamma"]


def test_list_and_call_show_the_tool_and_its_output(
    kiln_server: RunningKiln, tmp_path: Path
) -> None:
    make_tool(tmp_path, "delta", "import json, sys\nprint(json.load(sys.stdin)['x'] * 2)\n")
    kiln(kiln_server, "push", str(tmp_path))
    listed = kiln(kiln_server, "list")
    assert listed.stdout.split()[:2] == ["delta", "enabled"]
    called = kiln(kiln_server, "call", "delta", "--args", '{"x": 21}')
    assert called.returncode == 0, called.stderr
    assert called.stdout.strip() == "42"
    wrong = kiln(kiln_server, "call", "delta", "--args", "{nope")
    assert wrong.returncode == 2
    assert "--args is not valid JSON" in wrong.stderr
    invalid = kiln(kiln_server, "call", "delta", "--args", '{"x": "twenty"}')
    assert invalid.returncode == 1
    assert "x: must be of type integer" in invalid.stderr
    assert "twenty" not in invalid.stderr


def test_an_unreachable_server_gets_a_clear_message_not_a_traceback(tmp_path: Path) -> None:
    from support.app import bound_socket

    make_tool(tmp_path, "lonely", "print(1)\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("KILN_")}
    with bound_socket() as dead:  # never listening: refused, and no one else can serve there
        env["KILN_URL"] = f"http://127.0.0.1:{dead.getsockname()[1]}"
        for args in (["tools", "list"], ["tools", "push", str(tmp_path)], ["bundles", "ls"]):
            done = subprocess.run(
                [sys.executable, "-m", "kiln.cli", *args],
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            assert done.returncode == 1, (args, done.stderr)
            assert "cannot reach" in done.stderr, (args, done.stderr)
            assert "Traceback" not in done.stderr


def test_pushing_a_directory_without_tool_folders_says_so(
    kiln_server: RunningKiln, tmp_path: Path
) -> None:
    done = kiln(kiln_server, "push", str(tmp_path))
    assert done.returncode == 1
    assert "no tool folders" in done.stderr


def test_a_malformed_url_gets_a_clear_message_not_a_traceback() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KILN_")}
    for url in ("http://127.0.0.1:notaport", "http://host/x y", "http://", "ftp://x"):
        done = subprocess.run(
            [sys.executable, "-m", "kiln.cli", "tools", "list", "--url", url],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 1, (url, done.stderr)
        assert done.stderr.startswith("kiln tools list: --url:"), (url, done.stderr)


def test_a_directory_holding_only_view_files_pushes_its_views(
    kiln_server: RunningKiln, tmp_path: Path
) -> None:
    (tmp_path / "only.view.json").write_text(json.dumps({"tools": ["tag:nothing-yet"]}))
    done = kiln(kiln_server, "push", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert "view only" in done.stdout
