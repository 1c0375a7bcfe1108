"""`kiln tools history | diff | restore` and `kiln tasks ls | get | result | cancel` as a user
runs them: the real command against a real `kiln dev`, through its REST and MCP routes."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.devserver import DevServer, kiln_dev

pytestmark = pytest.mark.slow

QUICK = "import json, sys\nprint('done', json.load(sys.stdin).get('x'))\n"
# Runs until it is cancelled; the test never waits for it to end by itself.
FOREVER = "import sys, time\nsys.stdin.read()\nwhile True:\n    time.sleep(1)\n"


def tool(root: Path, name: str, code: str, **manifest: Any) -> Path:
    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tool.json").write_text(json.dumps({"description": f"The {name} tool.", **manifest}))
    (folder / "main.py").write_text(code)
    return folder


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    root = tmp_path_factory.mktemp("cli-history")
    tools = root / "tools"
    x = {"type": "object", "properties": {"x": {"type": "integer"}}}
    tool(tools, "quick", QUICK, task="optional", timeout_seconds=60, input_schema=x)
    tool(tools, "forever", FOREVER, task="optional", timeout_seconds=600)
    with kiln_dev(root / "state", "--no-examples", "--tools", str(tools)) as server:
        yield server


def ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def refused(done: subprocess.CompletedProcess[str], status: int = 1) -> str:
    assert done.returncode == status, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    assert done.stdout == "", done.stdout
    return done.stderr.strip()


@pytest.fixture(scope="module")
def notes(dev: DevServer, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A tool saved three times: r1, r2 (new code), r3 (new code and description)."""
    root = tmp_path_factory.mktemp("notes")
    for code, description in (("one", "Notes."), ("two", "Notes."), ("three", "Short notes.")):
        folder = tool(root, "notes", f"print({code!r})\n")
        (folder / "tool.json").write_text(json.dumps({"description": description}))
        ok(dev.kiln("tools", "push", str(root)))
    return "notes"


def test_history_lists_every_revision_newest_first(dev: DevServer, notes: str) -> None:
    lines = ok(dev.kiln("tools", "history", notes)).splitlines()
    assert [line.split()[0] for line in lines] == ["r3", "r2", "r1"]
    revisions = json.loads(ok(dev.kiln("tools", "history", notes, "--json")))
    assert [r["revision"] for r in revisions] == [3, 2, 1]


def test_diff_of_two_revisions_is_a_unified_diff_of_tool_json_and_the_script(
    dev: DevServer, notes: str
) -> None:
    diff = ok(dev.kiln("tools", "diff", f"{notes}@1", f"{notes}@3"))
    assert "--- notes@1/tool.json\n+++ notes@3/tool.json\n" in diff
    assert '-  "description": "Notes.",\n+  "description": "Short notes.",\n' in diff
    assert "--- notes@1/main.py\n+++ notes@3/main.py\n" in diff
    assert "-print('one')\n+print('three')\n" in diff
    assert ok(dev.kiln("tools", "diff", notes, "1", "3")) == diff
    assert ok(dev.kiln("tools", "diff", notes, "r1", "head")) == diff
    code_only = ok(dev.kiln("tools", "diff", f"{notes}@1", f"{notes}@2"))
    assert "tool.json" not in code_only
    assert ok(dev.kiln("tools", "diff", f"{notes}@2", f"{notes}@2")) == ""


def test_restore_makes_a_new_head_from_an_old_revision_and_never_overwrites(
    dev: DevServer, notes: str
) -> None:
    assert ok(dev.kiln("tools", "restore", notes, "1")).split() == [
        "restored", "notes", "r1", "as", "r4",
    ]  # fmt: skip
    head = dev.api("GET", "/api/tools/notes").json()
    assert (head["revision"], head["code"]) == (4, "print('one')\n")
    assert "restored from r1" in ok(dev.kiln("tools", "history", notes)).splitlines()[0]
    again = ok(dev.kiln("tools", "restore", notes, "r1")).strip()
    assert again == "unchanged notes: r4 already is what r1 was"
    # Read r3 as the head, someone restored meanwhile: this restore is refused, not applied.
    stale = refused(dev.kiln("tools", "restore", notes, "2", "--if-head", "3"))
    assert stale.startswith("kiln tools restore: HTTP 412"), stale
    assert dev.api("GET", "/api/tools/notes").json()["revision"] == 4


@pytest.mark.parametrize(
    ("args", "status", "said"),
    [
        (("diff", "notes@x", "notes@3"), 2, "'x' is not a revision: give its number"),
        (("diff", "notes", "notes@3"), 2, "'notes' is not NAME@REV"),
        (("diff", "notes@1"), 2, "give two revisions: NAME@A NAME@B"),
        (("diff", "notes@1", "notes@9"), 1, "HTTP 404: tool 'notes' has no revision 9"),
        (("diff", "nosuch@1", "notes@2"), 1, "HTTP 404"),
        (("history", "nosuch"), 1, "HTTP 404"),
        (("restore", "notes", "9"), 1, "HTTP 404: tool 'notes' has no revision 9"),
        (("restore", "nosuch", "1"), 1, "HTTP 404"),
        (("restore", "notes", "0"), 2, "'0' is not a revision"),
        (("restore", "notes", "head"), 2, "name an earlier revision"),
    ],
)
def test_bad_names_and_revisions_get_a_specific_error(
    dev: DevServer, notes: str, args: tuple[str, ...], status: int, said: str
) -> None:
    message = refused(dev.kiln("tools", *args), status)
    assert message.startswith(f"kiln tools {args[0]}: "), message
    assert said in message, message
    if "nosuch" in args and status == 1:
        assert "nosuch" in message, message


def started(dev: DevServer, name: str, arguments: str = "{}") -> str:
    task_id, status = ok(dev.kiln("tools", "call", name, "--task", "--args", arguments)).split()
    assert status == "working", status
    return task_id


def test_a_task_started_from_the_cli_is_listed_read_and_its_result_printed(
    dev: DevServer,
) -> None:
    task_id = started(dev, "quick", '{"x": 7}')
    assert ok(dev.kiln("tasks", "result", task_id)).strip() == "done 7"
    task = json.loads(ok(dev.kiln("tasks", "get", task_id)))
    assert task["status"] == "completed"
    assert task["mcp_result"]["content"] == [{"type": "text", "text": "done 7"}]
    listed = {line.split()[0]: line.split()[1] for line in ok(dev.kiln("tasks", "ls")).splitlines()}
    assert listed[task_id] == "completed"
    assert any(t["taskId"] == task_id for t in json.loads(ok(dev.kiln("tasks", "ls", "--json"))))


def test_a_cancelled_task_says_so_and_has_no_result(dev: DevServer) -> None:
    task_id = started(dev, "forever")
    assert ok(dev.kiln("tasks", "cancel", task_id)).split() == [task_id, "cancelled"]
    message = refused(dev.kiln("tasks", "result", task_id, "--wait", "0"))
    assert message == f"kiln tasks result: task {task_id} was cancelled"


@pytest.mark.parametrize("command", ["get", "result", "cancel"])
@pytest.mark.parametrize("task_id", ["no-such-task", "-qNo-such-task"])
def test_an_unknown_task_id_is_a_clear_error(dev: DevServer, command: str, task_id: str) -> None:
    """An id may start with a dash (URL-safe base64): it is an id, not an unknown option."""
    message = refused(dev.kiln("tasks", command, task_id))
    assert message.startswith(f"kiln tasks {command}: HTTP 404: no task with this id"), message


def test_a_breaking_push_is_refused_unless_said_and_diff_names_what_it_breaks(
    dev: DevServer, tmp_path: Path
) -> None:
    loose = {"type": "object", "properties": {"city": {"type": "string"}}}
    strict = {**loose, "required": ["city"], "additionalProperties": False}
    tool(tmp_path, "forecast", "print('sun')\n", input_schema=loose)
    ok(dev.kiln("tools", "push", str(tmp_path)))
    tool(tmp_path, "forecast", "print('rain')\n", input_schema=strict)
    said = refused(dev.kiln("tools", "push", str(tmp_path)))
    assert "HTTP 409" in said, said
    assert "input_schema/properties/city: now required" in said, said
    assert "input_schema/additionalProperties: properties it does not name" in said, said
    assert "--breaking" in said, said
    assert ok(dev.kiln("tools", "history", "forecast")).splitlines()[0].startswith("r1 ")
    assert "updated   forecast" in ok(dev.kiln("tools", "push", "--breaking", str(tmp_path)))
    diff = ok(dev.kiln("tools", "diff", "forecast@1", "forecast@2"))
    head, _, patch = diff.partition("--- forecast@1/tool.json\n")
    assert head.splitlines() == [
        "# breaking: forecast@1 -> forecast@2 breaks 2 thing(s) for clients",
        "#   required-input       input_schema/properties/city: now required",
        "#   closed-properties    input_schema/additionalProperties: properties it does not "
        "name are refused now",
        "# forecast@2 was saved as breaking (it said so)",
    ], diff
    assert "-print('sun')\n+print('rain')\n" in patch, diff
    back = ok(dev.kiln("tools", "diff", "forecast@2", "forecast@1"))
    assert back.startswith("--- forecast@2/tool.json"), "widening back breaks nothing: " + back
