"""A tool's own files and unchanged saves, through the REST API of a real server."""

from __future__ import annotations

import base64

from harness import RunningKiln

TOOL = {
    "name": "reader",
    "description": "Reads its data file.",
    "language": "python",
    "code": "import lib\nprint(lib.first_line())\n",
    "files": {
        "lib.py": base64.b64encode(
            b"def first_line():\n    return open('data/words.txt').readline().strip()\n"
        ).decode(),
        "data/words.txt": base64.b64encode(b"kiln\nfire\n").decode(),
    },
}


def test_files_are_stored_with_the_tool_and_written_beside_the_script(
    kiln_server: RunningKiln,
) -> None:
    created = kiln_server.api("POST", "/api/tools", json=TOOL)
    assert created.status_code == 201, created.text
    body = kiln_server.api("GET", "/api/tools/reader").json()
    assert body["files"] == TOOL["files"]
    run = kiln_server.api("POST", "/api/tools/reader/run", json={"arguments": {}}).json()
    assert run["stdout"].strip() == "kiln", run


def test_saving_an_identical_tool_keeps_the_current_revision(kiln_server: RunningKiln) -> None:
    kiln_server.api("POST", "/api/tools", json=TOOL)
    again = kiln_server.api("PUT", "/api/tools/reader", json=TOOL, headers={"If-Match": '"1"'})
    assert again.status_code == 200
    assert again.json()["revision"] == 1
    assert again.headers["ETag"] == '"1"'
    revisions = kiln_server.api("GET", "/api/tools/reader/revisions").json()["revisions"]
    assert [r["revision"] for r in revisions] == [1]
    changed = {**TOOL, "description": "Reads its data file, again."}
    saved = kiln_server.api("PUT", "/api/tools/reader", json=changed, headers={"If-Match": '"1"'})
    assert saved.json()["revision"] == 2


def test_a_file_path_that_could_leave_the_run_directory_is_refused_by_name(
    kiln_server: RunningKiln,
) -> None:
    bad = {**TOOL, "files": {"../escape.py": "eA==", "main.py": "eA==", "ok.txt": "not base64!"}}
    refused = kiln_server.api("POST", "/api/tools", json=bad)
    assert refused.status_code == 422
    violations = {v["field"]: v["message"] for v in refused.json()["error"]["violations"]}
    assert violations == {
        "files['../escape.py']": (
            "files['../escape.py'] must be a relative path of at most 200 characters from "
            "A-Z a-z 0-9 . _ - and /, with no empty, '.' or '..' part and no part starting "
            "with '.' (rule: path)."
        ),
        "files['main.py']": (
            "files['main.py'] is the manifest's or the script's own name; give the file "
            "another name (rule: path)."
        ),
        "files['ok.txt']": "files['ok.txt'] must be the file's bytes as a base64 string "
        "(rule: base64).",
    }
    assert kiln_server.api("GET", "/api/tools").json()["tools"] == []
