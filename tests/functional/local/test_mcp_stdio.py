"""`kiln stdio` as a desktop client launches it: a real process, JSON-RPC lines on its pipes."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.devserver import DEV_KEY, DevServer, kiln_dev

ROOT = Path(__file__).resolve().parents[3]


def run_stdio(tmp_path: Path, lines: list[dict[str, Any] | bytes]) -> list[dict[str, Any]]:
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
        input=b"".join(
            (line if isinstance(line, bytes) else json.dumps(line).encode()) + b"\n"
            for line in lines
        ),
        capture_output=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert process.returncode == 0, process.stderr
    return [json.loads(line) for line in process.stdout.splitlines()]


def test_kiln_stdio_answers_every_bad_line_and_keeps_serving(tmp_path: Path) -> None:
    big = b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"pad":"' + b"x" * 100_000 + b'"}}'
    huge = b'{"jsonrpc":"2.0","id":2,"method":"ping","pad":"' + b"y" * 2_000_000 + b'"}'
    replies = run_stdio(
        tmp_path,
        [
            big,  # over asyncio's 64 KiB line buffer, under the 1 MiB message limit
            b'{"jsonrpc":"2.0","id":"\\udfff","method":"ping"}',
            huge,  # over the message limit
            b"\xff\xfe not json",
            b'{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"x\\udfff"}}',
            {"jsonrpc": "2.0", "id": 6, "method": "ping"},
        ],
    )
    assert len(replies) == 6  # concurrent lines may answer in any order
    by_id = {reply["id"]: reply for reply in replies if reply["id"] is not None}
    assert by_id[1] == {"jsonrpc": "2.0", "id": 1, "result": {}}
    assert by_id[5]["error"]["code"] == -32600
    assert by_id[6] == {"jsonrpc": "2.0", "id": 6, "result": {}}
    anonymous = sorted(r["error"]["message"] for r in replies if r["id"] is None)
    assert anonymous[0].startswith("Invalid Request: id holds a \\u escape")
    assert anonymous[1] == f"Invalid Request: the line is {len(huge)} bytes, the limit is 1048576"
    assert anonymous[2].startswith("Parse error: the body is not valid UTF-8")


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


@pytest.mark.parametrize("ending", ["stdin closed", "SIGTERM"])
def test_kiln_stdio_leaves_no_run_behind_however_its_client_stops_it(
    tmp_path: Path, ending: str
) -> None:
    """A call leaves a standby waiting for the tool's next call; it goes with the server."""
    temp = tmp_path / "temp"
    temp.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "KILN_"))}
    process = subprocess.Popen(
        [sys.executable, "-m", "kiln.cli", "stdio", "--no-examples", "--tools",
         str(ROOT / "examples" / "conformance"), "--state-dir", str(tmp_path / ".kiln")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        env={**env, "TMPDIR": str(temp)},
    )  # fmt: skip
    assert process.stdin is not None
    assert process.stdout is not None
    try:
        call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": "test_simple_text", "arguments": {}}}  # fmt: skip
        process.stdin.write(json.dumps(call).encode() + b"\n")
        process.stdin.flush()
        assert json.loads(process.stdout.readline())["result"]["isError"] is False
        deadline = time.monotonic() + 10
        while not list(temp.glob("kiln-run-*")):  # the standby, made after the answer
            assert time.monotonic() < deadline, "no standby was made"
            time.sleep(0.05)
        if ending == "SIGTERM":
            process.send_signal(signal.SIGTERM)
        else:
            process.stdin.close()
        process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        process.stdout.close()
        if not process.stdin.closed:
            process.stdin.close()
    assert list(temp.glob("kiln-run-*")) == []


def test_kiln_stdio_reads_stdin_from_a_regular_file_and_warns_of_nothing(tmp_path: Path) -> None:
    """`kiln stdio < requests.jsonl` once ended in a traceback (a file is not a pipe); and
    every start wrote a KILN_LEDGER_DIGEST_KEY warning into the desktop client's log."""
    requests = tmp_path / "requests.jsonl"
    ping = {"jsonrpc": "2.0", "id": 7, "method": "ping", "params": {}}
    requests.write_text(json.dumps(ping) + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "KILN_"))}
    with requests.open("rb") as stdin:
        process = subprocess.run(
            [sys.executable, "-m", "kiln.cli", "stdio", "--no-examples",
             "--state-dir", str(tmp_path / ".kiln")],
            stdin=stdin, capture_output=True, env=env, timeout=120, check=False,
        )  # fmt: skip
    stderr = process.stderr.decode(errors="replace")
    assert process.returncode == 0, stderr
    assert [json.loads(line)["id"] for line in process.stdout.splitlines()] == [7]
    assert "Traceback" not in stderr
    assert "WARNING" not in stderr, stderr


def test_kiln_stdio_as_a_second_user_is_not_stopped_by_anothers_bundle_cache(
    tmp_path: Path,
) -> None:
    """Another user's Kiln made the shared temporary directory's bundle cache first (root's
    `kiln dev`, say): a second user's `kiln stdio` uses a cache of its own, not theirs."""
    from support.devserver import SYSTEM_PYTHON, unprivileged_user

    uid, gid = unprivileged_user()
    base = Path(tempfile.mkdtemp(prefix="kiln-stdio-second-user-"))
    try:
        base.chmod(0o755)
        shared_tmp, home, tools = base / "tmp", base / "home", base / "tools" / "hello"
        shared_tmp.mkdir(mode=0o1777)
        shared_tmp.chmod(0o1777)
        for theirs in ("kiln-bundles", f"kiln-bundles-{uid}"):  # before and after the fix
            (shared_tmp / theirs / ".tmp").mkdir(parents=True)
        tools.mkdir(parents=True)
        (tools / "tool.json").write_text(json.dumps({"description": "Says hello."}))
        (tools / "main.py").write_text("print('hello')\n")
        home.mkdir()
        os.chown(home, uid, gid)
        packages = sysconfig.get_paths()["purelib"]
        env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "TMPDIR": str(shared_tmp),
               "PYTHONPATH": f"{ROOT / 'functions'}:{packages}"}  # fmt: skip
        lines = [{"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                  "params": {"name": "hello", "arguments": {}}}]  # fmt: skip
        process = subprocess.run(
            ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups",
             str(SYSTEM_PYTHON), "-m", "kiln.cli", "stdio", "--no-examples",
             "--tools", str(tools.parent), "--state-dir", str(home / ".kiln")],
            input="".join(json.dumps(line) + "\n" for line in lines).encode(),
            capture_output=True, env=env, timeout=120, check=False,
        )  # fmt: skip
        assert process.returncode == 0, process.stderr.decode()
        [reply] = [json.loads(line) for line in process.stdout.splitlines()]
        assert "error" not in reply, (reply, process.stderr.decode()[-2000:])
        assert reply["result"]["content"][0]["text"].strip() == "hello", reply
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_kiln_stdio_sends_a_calls_progress_and_logs_as_lines_before_its_result(
    tmp_path: Path,
) -> None:
    """Over HTTP they were events on the call's answer; over stdio they were dropped."""
    call = {"jsonrpc": "2.0", "method": "tools/call"}
    replies = run_stdio(
        tmp_path,
        [
            {**call, "id": 1, "params": {"name": "test_tool_with_progress", "arguments": {},
                                         "_meta": {"progressToken": "p1"}}},
            {**call, "id": 2, "params": {"name": "test_tool_with_logging", "arguments": {}}},
        ],
    )  # fmt: skip
    for rid, method in ((1, "notifications/progress"), (2, "notifications/message")):
        token = "p1" if rid == 1 else None
        said = [
            r["params"]
            for r in replies
            if r.get("method") == method and r["params"].get("progressToken") == token
        ]
        assert len(said) == 3, replies
        answered = [i for i, r in enumerate(replies) if r.get("id") == rid]
        assert len(answered) == 1, replies
        last_said = max(i for i, r in enumerate(replies) if r.get("method") == method)
        assert last_said < answered[0], f"{method} after the result of call {rid}: {replies}"
    progress = [
        r["params"]["progress"] for r in replies if r.get("method") == "notifications/progress"
    ]
    assert progress == [0, 50, 100]


@pytest.fixture(scope="module")
def sdk_client() -> Path:
    """The official Python SDK 2.x client, in a virtualenv of the toolchain cache."""
    import support.toolchain as toolchain

    return toolchain.python_venv(toolchain.CACHE / "py-mcp-2.3.0", "mcp==2.3.0")


@pytest.fixture(scope="module")
def dev_with_fixtures(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    """A `kiln dev` serving the conformance fixtures, for `kiln stdio --url`."""
    state = tmp_path_factory.mktemp("bridged") / "state"
    tools = str(ROOT / "examples" / "conformance")
    with kiln_dev(state, "--no-examples", "--tools", tools) as server:
        yield server


@pytest.mark.parametrize(
    ("mode", "bridged"), [("legacy", False), ("2026-07-28", False), ("legacy", True)]
)
def test_the_python_sdk_client_over_kiln_stdio_answers_questions_and_hears_progress_and_logs(
    tmp_path: Path, sdk_client: Path, mode: str, bridged: bool, request: pytest.FixtureRequest
) -> None:
    """On 2025 a question is a real request to the client on the held call (it was a tool
    error about AWS Lambda); on 2026-07-28 input_required rounds. Progress and logs arrive.
    Bridged (`kiln stdio --url` to a kiln dev) each message is relayed as it arrives: the
    bridge read the whole answer first, so a held question waited for itself."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "KILN_"))}
    if bridged:
        dev: DevServer = request.getfixturevalue("dev_with_fixtures")
        where = ["--url", dev.url, "--key", DEV_KEY]
    else:
        where = ["--no-examples", "--tools", str(ROOT / "examples" / "conformance"),
                 "--state-dir", str(tmp_path / ".kiln")]  # fmt: skip
    server = {"command": sys.executable, "args": ["-m", "kiln.cli", "stdio", *where], "env": env}
    script = ROOT / "tests" / "functional" / "clients" / "sdk_talk_client.py"
    try:
        done = subprocess.run(
            [str(sdk_client), str(script), json.dumps(server), mode],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired as stuck:  # a call that never ends: say where it was
        said = (
            (stuck.stderr or b"").decode(errors="replace")
            if isinstance(stuck.stderr, bytes)
            else str(stuck.stderr or "")
        )
        pytest.fail(f"the SDK client did not finish in 120 s; its stderr:\n{said[-3000:]}")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["protocol"] == ("2025-11-25" if mode == "legacy" else mode)
    assert seen["results"] == {
        "test_elicitation": [
            False,
            'User response: action=accept, content={"username": "ada", "email": "a@x"}',
        ],
        "test_sampling": [False, "LLM response: Paris"],
        "test_tool_with_progress": [False, "Progress test completed"],
        "test_tool_with_logging": [False, "Logging test completed"],
    }, done.stderr[-3000:]
    assert seen["elicited"] == ["Who are you?"]
    assert seen["sampled"] == ["Capital of France?"]
    assert seen["progress"] == [0, 50, 100]
    assert seen["logs"] == [
        "Tool execution started",
        "Tool processing data",
        "Tool execution completed",
    ]


def initialize(capabilities: dict[str, Any]) -> dict[str, Any]:
    params = {"protocolVersion": "2025-06-18", "capabilities": capabilities,
              "clientInfo": {"name": "desktop", "version": "1"}}  # fmt: skip
    return {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params}


ELICIT = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
          "params": {"name": "test_elicitation", "arguments": {"message": "Who?"}}}  # fmt: skip


def test_kiln_stdio_asks_only_what_the_client_declared_at_initialize(tmp_path: Path) -> None:
    """A stdio connection is a session: a client that declared no elicitation is not sent one
    (the tool sees it in KILN_CAN_ASK); its call says why instead of waiting for an answer."""
    replies = run_stdio(tmp_path, [initialize({}), ELICIT])
    assert not [r for r in replies if r.get("method") == "elicitation/create"], replies
    [result] = [r["result"] for r in replies if r.get("id") == 2]
    assert result["isError"] is True
    assert result["content"][0]["text"] == (
        "Tool 'test_elicitation' asks the client a question (elicitation/create), and this "
        "client did not declare elicitation in its capabilities at initialize"
    )


def test_a_question_kiln_stdio_holds_ends_its_call_when_stdin_ends(tmp_path: Path) -> None:
    """Input ends before an answer comes (or before the question is even asked): the call ends
    at once with a tool error, and the process exits (it waited out its whole budget)."""
    replies = run_stdio(tmp_path, [initialize({"elicitation": {}}), ELICIT])
    [result] = [r["result"] for r in replies if r.get("id") == 2]
    assert result["isError"] is True
    assert result["content"][0]["text"] == (
        "Tool 'test_elicitation' could not go on: the client closed its input before answering"
    )
