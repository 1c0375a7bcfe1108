"""The script's environment: an allow-list, a private directory, the bundle on its path."""

from __future__ import annotations

import asyncio
import contextlib
import json
import stat
from pathlib import Path

import pytest

from support.runner import Harness, wait_for
from support.runner import harness_fixture as harness_fixture

PRINT_ENV_PY = "import json, os\nprint(json.dumps(dict(os.environ)))\n"
PRINT_ENV_NODE = "console.log(JSON.stringify(process.env))\n"


@pytest.fixture
def planted_secrets(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    values = ["planted-aws-secret-0123", "planted-author-key-4567", "planted-token-89"]
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", values[0])
    monkeypatch.setenv("KILN_AUTHOR_KEY", values[1])
    monkeypatch.setenv("AWS_SESSION_TOKEN", values[2])
    return values


@pytest.mark.parametrize(("language", "code"), [("python", PRINT_ENV_PY), ("node", PRINT_ENV_NODE)])
def test_script_sees_no_server_secrets_only_the_allow_list(
    harness: Harness, planted_secrets: list[str], language: str, code: str
) -> None:
    result = harness.run(code, language=language)  # type: ignore[arg-type]
    env = json.loads(result.stdout)
    for value in planted_secrets:
        assert value not in result.stdout
    # The talk contract's variables are the only KILN_ names a script sees (KILN_CALLS: the
    # tools it may call, runner/TALKING.md "Calling tools").
    talk = {"KILN_TALK_FD", "KILN_ANSWERS", "KILN_CAN_ASK", "KILN_CALLS"}
    assert not [n for n in env if n.startswith(("AWS_", "KILN_")) and n not in talk]
    assert talk <= set(env)
    allowed = {
        "PATH",
        "LANG",
        "LC_ALL",
        "HOME",
        "TMPDIR",
        "PYTHONDONTWRITEBYTECODE",
        "PYTHONUNBUFFERED",
        "PYTHONIOENCODING",
        "RUN_TEST_MARKER",
        "SHARED_DIR",
    }
    assert set(env) - {"PWD", "SHLVL", "_"} - talk <= allowed  # a shell or node may add those
    assert env["PATH"].endswith("/usr/local/bin:/usr/bin:/bin")
    assert env["LC_ALL"] == "C.UTF-8"
    assert env["HOME"] == env["TMPDIR"]
    harness.assert_clean()


def test_tool_settings_cannot_replace_the_runners_own_variables(harness: Harness) -> None:
    result = harness.run(
        PRINT_ENV_PY, extra_env={"API_TOKEN": "tool-secret", "HOME": "/root", "PATH": "/evil"}
    )
    env = json.loads(result.stdout)
    assert env["API_TOKEN"] == "tool-secret"
    assert env["HOME"] != "/root"
    assert "/evil" not in env["PATH"]
    harness.assert_clean()


def test_invalid_tool_setting_name_is_refused(harness: Harness) -> None:
    with pytest.raises(
        ValueError, match="extra_env name 'A=B' is not a valid environment variable"
    ):
        harness.run("print(1)", extra_env={"A=B": "x"})
    harness.assert_clean()


def test_each_run_gets_a_fresh_private_directory_that_is_removed(harness: Harness) -> None:
    code = (
        "import json, os, stat, tempfile\n"
        "here = os.getcwd()\n"
        "open('left-behind.txt', 'w').write('x')\n"
        "print(json.dumps({'cwd': here, 'mode': stat.S_IMODE(os.stat(here).st_mode),\n"
        "  'home': os.environ['HOME'], 'tmp': tempfile.gettempdir(),\n"
        "  'files': sorted(os.listdir(here))}))\n"
    )
    first = json.loads(harness.run(code).stdout)
    second = json.loads(harness.run(code).stdout)
    assert first["cwd"] != second["cwd"]
    assert Path(first["cwd"]).parent == harness.work_root
    assert first["mode"] == stat.S_IRWXU
    assert first["home"] == first["tmp"] == first["cwd"]
    # nothing from the first run; Kiln's helper for calling tools beside every script
    assert second["files"] == ["kiln_tools", "left-behind.txt", "main.py"]
    assert not Path(first["cwd"]).exists()
    harness.assert_clean()


def test_directory_is_removed_after_a_timeout(harness: Harness) -> None:
    code = "import os, time\nopen('partial.txt', 'w').write('x' * 1000)\ntime.sleep(60)\n"
    result = harness.run(code, timeout_s=0.5)
    assert result.timed_out
    harness.assert_clean()


def test_python_bundle_is_importable_and_its_pth_files_run(
    harness: Harness, tmp_path: Path
) -> None:
    bundle = tmp_path / "bundle"
    (bundle / "greeting").mkdir(parents=True)
    (bundle / "greeting" / "__init__.py").write_text("def hello(n):\n    return f'hello {n}'\n")
    (bundle / "extra").mkdir()
    (bundle / "extra" / "shouting.py").write_text("LOUD = True\n")
    (bundle / "extra.pth").write_text("extra\n")
    code = (
        "import json, sys\nfrom greeting import hello\nimport shouting\n"
        "print(hello(json.load(sys.stdin)['name']), shouting.LOUD)\n"
    )
    result = harness.run(code, arguments={"name": "kiln"}, bundle_path=bundle)
    assert result.stdout == "hello kiln True\n"
    harness.assert_clean()


def test_python_tool_does_not_see_the_servers_site_packages(harness: Harness) -> None:
    result = harness.run("import fastapi\n")
    assert result.exit_code == 1
    assert "ModuleNotFoundError: No module named 'fastapi'" in result.stderr
    harness.assert_clean()


def test_python_tool_writes_no_bytecode_into_its_bundle(harness: Harness, tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "helper.py").write_text("X = 1\n")
    harness.run("import helper\nprint(helper.X)", bundle_path=bundle)
    assert not (bundle / "__pycache__").exists()
    harness.assert_clean()


def test_node_bundle_is_found_through_node_path(harness: Harness, tmp_path: Path) -> None:
    package = tmp_path / "bundle" / "node_modules" / "greet"
    package.mkdir(parents=True)
    (package / "index.js").write_text("module.exports = (n) => `hello ${n}`;\n")
    code = (
        "const fs = require('node:fs');\nconst greet = require('greet');\n"
        "const args = JSON.parse(fs.readFileSync(0, 'utf8'));\n"
        "console.log(greet(args.name));\n"
    )
    result = harness.run(
        code, language="node", arguments={"name": "kiln"}, bundle_path=tmp_path / "bundle"
    )
    assert result.stdout == "hello kiln\n"
    harness.assert_clean()


WAIT_PY = (
    "import json, os, sys, time\nargs = json.load(sys.stdin)\n"
    "shared = os.environ['SHARED_DIR']\n"
    "open(os.path.join(shared, 'pid'), 'w').write(str(os.getpid()))\n"
    "while not os.path.exists(os.path.join(shared, 'go')):\n    time.sleep(0.01)\n"
    "print(os.environ['API_TOKEN'], args['a'])\n"
)
WAIT_NODE = (
    "const fs = require('node:fs');\nconst path = require('node:path');\n"
    "const args = JSON.parse(fs.readFileSync(0, 'utf8'));\nconst shared = process.env.SHARED_DIR;\n"
    "fs.writeFileSync(path.join(shared, 'pid'), String(process.pid));\n"
    "const wait = () => fs.existsSync(path.join(shared, 'go'))\n"
    "  ? console.log(process.env.API_TOKEN, args.a) : setTimeout(wait, 10);\nwait();\n"
)


def proc_view(pid: str) -> bytes:
    """What /proc shows of `pid`; a non-dumpable process's environ only root may read."""
    shown = Path(f"/proc/{pid}/cmdline").read_bytes()
    with contextlib.suppress(PermissionError):
        shown += Path(f"/proc/{pid}/environ").read_bytes()
    return shown


@pytest.mark.parametrize(("language", "code"), [("python", WAIT_PY), ("node", WAIT_NODE)])
def test_secrets_and_arguments_are_never_in_the_scripts_proc_environ_or_cmdline(
    harness: Harness, language: str, code: str
) -> None:
    """What /proc shows (to root here) while the script runs; the script has both."""

    async def scenario() -> tuple[bytes, str]:
        task = asyncio.create_task(
            harness.runner.run(
                harness.request(
                    code,
                    language=language,  # type: ignore[arg-type]
                    extra_env={"API_TOKEN": "tool-secret-42"},
                    arguments={"a": "argument-value-17"},
                )
            )
        )
        pid_file = harness.shared / "pid"
        await asyncio.to_thread(wait_for, lambda: pid_file.exists() and pid_file.read_text())
        shown = await asyncio.to_thread(proc_view, pid_file.read_text())
        (harness.shared / "go").touch()
        return shown, (await task).stdout

    shown, stdout = asyncio.run(scenario())
    # The script's own process was read: Node shows its command line; a forked Python
    # script shows the helper's (it never exec'd).
    assert (b"main.cjs" if language == "node" else b"supervisor.py") in shown
    assert b"tool-secret-42" not in shown
    assert b"argument-value-17" not in shown
    assert stdout == "tool-secret-42 argument-value-17\n"
    harness.assert_clean()


def test_a_python_tool_is_not_dumpable_and_carries_the_run_mark(harness: Harness) -> None:
    code = (
        "import ctypes\nprint(ctypes.CDLL(None).prctl(3, 0, 0, 0, 0))\n"  # PR_GET_DUMPABLE
        "print([l.split()[1] for l in open('/proc/self/status') if l.startswith('NoNewPrivs')])\n"
    )
    assert harness.run(code).stdout == "0\n['1']\n"
    harness.assert_clean()


def test_a_python_tool_inherits_no_descriptor_but_its_streams_and_talk(harness: Harness) -> None:
    """A descriptor to a directory outside its view would let a tool climb out of it; the
    talk pipe (KILN_TALK_FD, 10) is the one descriptor beside the standard three."""
    code = (
        "import os\nfds = os.listdir('/proc/self/fd')\n"
        "print(sorted(int(fd) for fd in fds if os.path.exists(f'/proc/self/fd/{fd}')))\n"
    )
    # 3 is the directory listing itself, still open while it is read.
    assert harness.run(code).stdout in ("[0, 1, 2, 10]\n", "[0, 1, 2, 3, 10]\n")
    harness.assert_clean()
