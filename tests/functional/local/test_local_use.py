"""Local use as a new user meets it: `kiln` commands beside `kiln dev`, from any directory,
with no environment variables but PATH and HOME (HOME a fresh directory)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from support.devserver import serving

KILN = Path(sys.executable).parent / "kiln"


def user_env(home: Path, **extra: str) -> dict[str, str]:
    return {"PATH": f"{KILN.parent}{os.pathsep}{os.environ['PATH']}", "HOME": str(home), **extra}


def state_of(home: Path) -> Path:
    return home / ".local" / "state" / "kiln"


def kiln(
    home: Path, cwd: Path, *args: str, stdin: str = "", **env: str
) -> subprocess.CompletedProcess[str]:
    cwd.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [str(KILN), *args],
        cwd=cwd,
        env=user_env(home, **env),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert "Traceback" not in done.stderr, done.stderr
    return done


@dataclass
class Dev:
    url: str
    process: subprocess.Popen[bytes]
    out: Path
    err: Path

    def stderr(self) -> str:
        return self.err.read_text()


@contextmanager
def kiln_dev(home: Path, cwd: Path, *extra: str, **env: str) -> Iterator[Dev]:
    """`kiln dev --port 0`: the port it binds is the one it announces (and records for the
    `kiln` commands beside it)."""
    cwd.mkdir(parents=True, exist_ok=True)
    run = f"dev-{time.monotonic_ns()}"
    out, err = cwd / f"{run}.out", cwd / f"{run}.err"
    command = [str(KILN), "dev", "--port", "0", "--no-examples", *extra]
    with serving(command, out, errors=err, env=user_env(home, **env), cwd=cwd) as served:
        dev = Dev(served.url, served.process, out, err)
        yield dev
    assert "Traceback" not in dev.stderr(), dev.stderr()


def tool_folder(root: Path, name: str, manifest: dict[str, Any], files: dict[str, str]) -> Path:
    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tool.json").write_text(json.dumps(manifest))
    for relative, text in files.items():
        (folder / relative).parent.mkdir(parents=True, exist_ok=True)
        (folder / relative).write_text(text)
    return folder


RATES_TOOL = {
    "description": "Convert an amount with the rates in rates.json.",
    "input_schema": {
        "type": "object",
        "properties": {"amount": {"type": "number"}, "to": {"type": "string"}},
        "required": ["amount", "to"],
    },
}
RATES_FILES = {
    "main.py": (
        "import json, sys\n"
        "from helpers.money import convert\n"
        "args = json.load(sys.stdin)\n"
        "print(convert(args['amount'], args['to']))\n"
    ),
    "helpers/__init__.py": "",
    "helpers/money.py": (
        "import json\n"
        "RATES = json.load(open('rates.json'))\n"
        "def convert(amount, to):\n"
        "    return f'{amount * RATES[to]:.2f} {to}'\n"
    ),
    "rates.json": '{"EUR": 1.17, "USD": 1.27}\n',
}


def stdio_call(name: str, arguments: dict[str, Any]) -> str:
    lines = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "test", "version": "1"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": name, "arguments": arguments},
        },
    ]
    return "".join(json.dumps(line) + "\n" for line in lines)


def call_text(stdout: str) -> str:
    replies = {reply["id"]: reply for reply in map(json.loads, stdout.splitlines())}
    return str(replies[2]["result"]["content"][0]["text"])


def test_without_kiln_dev_a_command_says_where_it_looked(tmp_path: Path) -> None:
    home = tmp_path / "home"
    done = kiln(home, tmp_path / "elsewhere", "tools", "list")
    assert done.returncode == 1
    assert done.stderr == (
        f"kiln tools list: no running kiln dev found: looked for {state_of(home)}/server.json "
        "(state directory from the per-user default). Start `kiln dev` (same state "
        "directory), or name a server with --url URL --key KEY (or KILN_URL and "
        "KILN_AUTHOR_KEY)\n"
    )


def test_a_folder_with_a_data_file_and_a_helper_module_works_through_push_call_and_pull(
    tmp_path: Path,
) -> None:
    home, project = tmp_path / "home", tmp_path / "project"
    tool_folder(project / "tools", "convert", RATES_TOOL, RATES_FILES)
    with kiln_dev(home, tmp_path / "server") as dev:
        elsewhere = tmp_path / "some" / "other" / "dir"
        pushed = kiln(home, elsewhere, "tools", "push", str(project / "tools"))
        assert pushed.returncode == 0, pushed.stderr
        assert pushed.stdout.split() == ["created", "convert"]

        called = kiln(
            home, elsewhere, "tools", "call", "convert", "--args", '{"amount": 10, "to": "EUR"}'
        )
        assert called.returncode == 0, called.stderr
        assert called.stdout.strip() == "11.70 EUR"

        pulled = kiln(home, elsewhere, "tools", "pull", str(tmp_path / "pulled"))
        assert pulled.returncode == 0, pulled.stderr
        for relative, text in RATES_FILES.items():
            assert (tmp_path / "pulled" / "convert" / relative).read_text() == text
        manifest = json.loads((tmp_path / "pulled" / "convert" / "tool.json").read_text())
        assert "name" not in manifest
        again = kiln(home, elsewhere, "tools", "push", str(tmp_path / "pulled"))
        assert again.stdout.split() == ["unchanged", "convert"]

        # kiln stdio from yet another directory serves the same catalog, and says which.
        stdio = kiln(
            home,
            tmp_path / "desktop",
            "stdio",
            stdin=stdio_call("convert", {"amount": 2, "to": "USD"}),
        )
        assert stdio.returncode == 0, stdio.stderr
        assert call_text(stdio.stdout) == "2.54 USD"
        assert stdio.stderr.splitlines()[-1] == (
            f"kiln stdio: serving the local catalog in {state_of(home)} (from the per-user "
            f"default), shared with the kiln dev at {dev.url}"
        )

        bridged = kiln(
            home,
            tmp_path / "desktop",
            "stdio",
            "--url",
            dev.url,
            stdin=stdio_call("convert", {"amount": 1, "to": "EUR"}),
        )
        assert bridged.returncode == 0, bridged.stderr
        assert call_text(bridged.stdout) == "1.17 EUR"
        assert (
            bridged.stderr
            == f"kiln stdio: serving the catalog of {dev.url}/mcp (bridged over HTTP)\n"
        )

        wrong = kiln(home, elsewhere, "tools", "call", "convert", "--key", "kiln_author_nope")
        assert wrong.returncode == 1
        assert wrong.stderr.startswith("kiln tools call: HTTP 401: ")
        assert wrong.stderr.endswith("(sent the key from --key)\n")


def test_the_printed_desktop_client_config_starts_kiln_stdio_on_the_same_catalog(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    tool_folder(
        tmp_path / "tools", "seven", {"description": "Prints 7."}, {"main.py": "print(7)\n"}
    )
    printed = kiln(home, tmp_path, "stdio", "--client-config")
    assert printed.returncode == 0, printed.stderr
    entry = json.loads(printed.stdout)["mcpServers"]["kiln"]
    assert entry["args"] == ["stdio", "--state-dir", str(state_of(home))]
    # A desktop client starts it from its own directory, with its own small environment.
    seeded = kiln(
        home, tmp_path, "stdio", "--no-examples", "--tools", str(tmp_path / "tools"), stdin=""
    )
    assert seeded.returncode == 0, seeded.stderr
    client = subprocess.run(
        [entry["command"], *entry["args"], "--no-examples"],
        cwd="/",
        env={"HOME": str(tmp_path / "another-home"), "PATH": "/usr/bin:/bin"},
        input=stdio_call("seven", {}),
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert client.returncode == 0, client.stderr
    assert call_text(client.stdout) == "7"
    assert "no kiln dev is running, so this process holds it" in client.stderr


def test_a_busy_port_is_reported_before_anything_else_with_the_port_hint(
    tmp_path: Path,
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = kiln(tmp_path / "home", tmp_path, "dev", "--port", str(port), "--no-examples")
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr == (
        f"kiln dev: port {port} on 127.0.0.1 is already in use by another program; "
        f"stop it, or choose another port: kiln dev --port {port + 1}\n"
    )
    assert not state_of(tmp_path / "home").exists()  # no key made, nothing started


def test_push_reports_every_bad_folder_at_once_and_writes_nothing(tmp_path: Path) -> None:
    root = tmp_path / "tools"
    for n in range(7):
        tool_folder(root, f"good{n}", {"description": "ok"}, {"main.py": "print(1)\n"})
    for n in range(4):
        tool_folder(root, f"nodesc{n}", {}, {"main.py": "print(1)\n"})
    for n in range(3):
        tool_folder(root, f"renamed{n}", {"description": "d", "name": "other"}, {"main.py": "1\n"})
    tool_folder(root, "noscript", {"description": "d"}, {"README.md": "no script here\n"})
    done = kiln(tmp_path / "home", tmp_path, "tools", "push", str(root))
    assert done.returncode == 1
    lines = done.stderr.splitlines()
    assert lines[0] == "kiln tools push: 8 problems, nothing was written:"
    assert len(lines) == 9
    assert lines[1] == f"  {root}/nodesc0: description is required (rule: required)."
    assert lines[5].startswith(f"  {root}/noscript: needs exactly one script")
    assert lines[6] == (
        f"  {root}/renamed0/tool.json: name: says 'other' but the folder is 'renamed0'; the "
        "folder's name is the tool's name (rename the folder, or remove \"name\" from tool.json)"
    )


def test_disk_and_api_edits_never_overwrite_each_other_silently(tmp_path: Path) -> None:
    home, tools = tmp_path / "home", tmp_path / "tools"
    folder = tool_folder(
        tools, "greet", {"description": "Greets."}, {"main.py": "print('disk 1')\n"}
    )
    with kiln_dev(home, tmp_path, "--tools", str(tools)) as dev:
        key = (state_of(home) / "author_key").read_text().strip()
        auth = {"Authorization": f"Bearer {key}"}
        tool = httpx.get(dev.url + "/api/tools/greet", headers=auth, timeout=60).json()
        edit = {
            **{k: tool[k] for k in ("name", "description", "language")},
            "code": "print('api 2')\n",
        }
        put = httpx.put(
            dev.url + "/api/tools/greet",
            json=edit,
            headers={**auth, "If-Match": '"1"'},
            timeout=60,
        )
        assert put.json()["revision"] == 2
    (folder / "main.py").write_text("print('disk 2')\n")
    with kiln_dev(home, tmp_path, "--tools", str(tools)) as dev:
        assert (
            f"kiln dev: skipped {folder}: changed on disk and through the API since the last "
            "start; kept revision 2 from the API. To take the disk version: kiln tools push "
            f"{folder}"
        ) in dev.stderr()
        called = kiln(home, tmp_path, "tools", "call", "greet")
        assert called.stdout.strip() == "api 2"
        taken = kiln(home, tmp_path, "tools", "push", str(folder))
        assert taken.stdout.split() == ["updated", "greet"]
    with kiln_dev(home, tmp_path, "--tools", str(tools)) as dev:
        assert "skipped" not in dev.stderr()
        assert kiln(home, tmp_path, "tools", "call", "greet").stdout.strip() == "disk 2"


def test_kiln_dev_says_at_start_when_node_tools_cannot_run(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-node"
    with kiln_dev(tmp_path / "home", tmp_path, KILN_NODE_BINARY=str(missing)) as dev:
        assert (
            f"kiln dev: warning: Node tools will fail here. Node.js binary {missing} (from "
            "KILN_NODE_BINARY) does not exist or is not executable"
        ) in dev.stderr()


WHOAMI = {
    "description": "Says which token it was given (its last four characters).",
    "secrets": ["API_TOKEN"],
}
WHOAMI_CODE = {"main.py": "import os\nprint('token ends', os.environ['API_TOKEN'][-4:])\n"}
SECRET = "s3cr3t-value-1234"


def test_every_command_works_beside_kiln_dev_and_the_secret_survives_a_restart(
    tmp_path: Path,
) -> None:
    home, project = tmp_path / "home", tmp_path / "project"
    tool_folder(project / "tools", "whoami", WHOAMI, WHOAMI_CODE)
    outputs: list[str] = []
    with kiln_dev(home, project) as dev:
        created = kiln(home, project, "keys", "create", "--name", "laptop", "--scope", "call")
        assert created.returncode == 0, created.stderr
        key = created.stdout.strip()
        assert key.startswith("kiln_call_")
        assert created.stderr.startswith("created call key 'laptop' (id ")

        pushed = kiln(home, project, "tools", "push", "tools")
        assert pushed.returncode == 0, pushed.stderr
        assert pushed.stdout.split() == ["created", "whoami"]

        undeclared = kiln(home, project, "secrets", "set", "whoami", "OTHER", stdin="x\n")
        assert undeclared.returncode == 1
        assert undeclared.stderr == (
            "kiln secrets set: HTTP 422: secret 'OTHER': tool 'whoami' does not declare it "
            '(it declares: API_TOKEN); add it to "secrets" in the tool\'s definition first\n'
        )
        stored = kiln(home, project, "secrets", "set", "whoami", "API_TOKEN", stdin=SECRET + "\n")
        assert stored.returncode == 0, stored.stderr
        assert stored.stdout == "set secret API_TOKEN for tool whoami\n"
        listed = kiln(home, project, "secrets", "ls", "whoami")
        assert listed.stdout.split() == ["NAME", "STATUS", "API_TOKEN", "set"]

        called = kiln(home, project, "tools", "call", "whoami")
        assert called.returncode == 0, called.stderr
        assert called.stdout.strip() == "token ends 1234"

        desktop = kiln(home, tmp_path / "desktop", "stdio", stdin=stdio_call("whoami", {}))
        assert desktop.returncode == 0, desktop.stderr
        assert call_text(desktop.stdout) == "token ends 1234"

        bearer = {"Authorization": f"Bearer {key}"}
        assert httpx.get(dev.url + "/api/tools", headers=bearer, timeout=60).status_code == 200
        revoked = kiln(home, project, "keys", "revoke", "laptop")
        assert revoked.returncode == 0, revoked.stderr
        assert revoked.stdout.startswith("revoked key 'laptop' (id ")
        refused = httpx.get(dev.url + "/api/tools", headers=bearer, timeout=60)
        assert refused.status_code == 401  # the very next request
        outputs += [p.stdout + p.stderr for p in (created, pushed, stored, called, desktop)]
        outputs.append(dev.stderr())

    with kiln_dev(home, project) as dev:
        again = kiln(home, tmp_path / "elsewhere", "tools", "call", "whoami")
        assert again.returncode == 0, again.stderr
        assert again.stdout.strip() == "token ends 1234"
        outputs.append(dev.stderr())
    assert not any(SECRET in text for text in outputs)
    private = state_of(home)
    assert private.stat().st_mode & 0o077 == 0


LENGTH_TOOL = {
    "description": "Prints the length of its text.",
    "input_schema": {
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "required": ["text"],
    },
}
LENGTH_FILES = {"main.py": "import json, sys\nprint(len(json.load(sys.stdin)['text']))\n"}


def test_the_url_bridge_relays_a_line_over_64_kib_and_answers_the_next_line_too(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    tools = tool_folder(tmp_path / "tools", "length", LENGTH_TOOL, LENGTH_FILES).parent
    long_call = stdio_call("length", {"text": "x" * 200_000})
    ping = json.dumps({"jsonrpc": "2.0", "id": 3, "method": "ping"}) + "\n"
    with kiln_dev(home, tmp_path / "server", "--tools", str(tools)) as dev:
        bridged = kiln(
            home, tmp_path / "desktop", "stdio", "--url", dev.url, stdin=long_call + ping
        )
        assert bridged.returncode == 0, bridged.stderr
        replies = {reply["id"]: reply for reply in map(json.loads, bridged.stdout.splitlines())}
        assert replies[2]["result"]["content"][0]["text"].strip() == "200000"
        assert replies[3]["result"] == {}

        # Over the bridge's own line limit (KILN_MAX_BODY_BYTES, as for the local kiln stdio):
        # refused with the sizes, and the next line is still read whole and answered.
        limited = kiln(
            home,
            tmp_path / "desktop",
            "stdio",
            "--url",
            dev.url,
            stdin=long_call + ping,
            KILN_MAX_BODY_BYTES="100000",
        )
        assert limited.returncode == 0, limited.stderr
        answers = [json.loads(line) for line in limited.stdout.splitlines()]
        refused = [answer for answer in answers if answer["id"] is None]
        assert refused == [
            {
                "jsonrpc": "2.0",
                "id": None,
                "error": {
                    "code": -32600,
                    "message": f"Invalid Request: the line is {len(long_call.splitlines()[2])} "
                    "bytes, the limit is 100000",
                },
            }
        ]
        assert {answer["id"] for answer in answers} == {1, None, 3}
