"""A tool's own files and unchanged saves, through the REST API of a real server."""

from __future__ import annotations

import base64

from support.app import RunningKiln

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
    # A client that knows nothing of files (an older studio, a script) keeps them.
    unaware = {k: v for k, v in TOOL.items() if k != "files"}
    kept = kiln_server.api("PUT", "/api/tools/reader", json=unaware, headers={"If-Match": '"1"'})
    assert kept.json()["revision"] == 1
    assert kiln_server.api("GET", "/api/tools/reader").json()["files"] == TOOL["files"]
    changed = {**TOOL, "description": "Reads its data file, again."}
    saved = kiln_server.api("PUT", "/api/tools/reader", json=changed, headers={"If-Match": '"1"'})
    assert saved.json()["revision"] == 2


def test_a_file_path_that_could_leave_the_run_directory_is_refused_by_name(
    kiln_server: RunningKiln,
) -> None:
    bad = {**TOOL, "files": {"../escape.py": "eA==", "main.py": "eA==", "main.cjs": "eA==",
                             "ok.txt": "not base64!"}}  # fmt: skip
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
        # A Node run's script is written as main.cjs: a file of that name would be lost.
        "files['main.cjs']": (
            "files['main.cjs'] is the manifest's or the script's own name; give the file "
            "another name (rule: path)."
        ),
        "files['ok.txt']": "files['ok.txt'] must be the file's bytes as a base64 string "
        "(rule: base64).",
    }
    assert kiln_server.api("GET", "/api/tools").json()["tools"] == []


def test_files_named_kiln_tools_are_refused_since_every_run_gets_kiln_s_helper_there(
    kiln_server: RunningKiln,
) -> None:
    names = ["kiln_tools.py", "kiln_tools.js", "kiln_tools/__init__.py", "kiln_tools"]
    bad = {**TOOL, "files": dict.fromkeys(names, "eA==")}
    refused = kiln_server.api("POST", "/api/tools", json=bad)
    assert refused.status_code == 422
    violations = {v["field"]: v["message"] for v in refused.json()["error"]["violations"]}
    assert set(violations) == {f"files[{name!r}]" for name in names}
    assert violations["files['kiln_tools.py']"] == (
        "files['kiln_tools.py'] kiln_tools is Kiln's own: every run gets its helper for calling "
        "tools there (`from kiln_tools import tools`, `require('./kiln_tools')`); give the file "
        "another name (rule: path)."
    )
    elsewhere = {**TOOL, "files": {"lib/kiln_tools.py": "eA==", "my_kiln_tools.py": "eA=="}}
    assert kiln_server.api("POST", "/api/tools", json=elsewhere).status_code == 201


def test_code_that_does_not_parse_is_refused_on_save_with_line_and_column(
    kiln_server: RunningKiln,
) -> None:
    python = {**TOOL, "files": {}, "code": "import json\ndef f(:\n    pass\n"}
    refused = kiln_server.api("POST", "/api/tools", json=python)
    assert refused.status_code == 422
    assert refused.json()["error"]["violations"] == [
        {
            "field": "code",
            "rule": "syntax",
            "message": "code does not parse: line 2, column 7: invalid syntax",
        }
    ]
    node = {**python, "language": "node", "code": "const a = 1;\nfoo(;\n"}
    refused = kiln_server.api("POST", "/api/tools", json=node)
    assert refused.status_code == 422
    assert refused.json()["error"]["violations"][0]["message"] == (
        "code does not parse: line 2, column 5: SyntaxError: Unexpected token ';'"
    )
    assert kiln_server.api("GET", "/api/tools").json()["tools"] == []


def test_a_deleted_tool_is_restored_while_its_name_is_free(kiln_server: RunningKiln) -> None:
    first = kiln_server.api("POST", "/api/tools", json=TOOL).json()
    kiln_server.api("DELETE", "/api/tools/reader")
    restored = kiln_server.api("POST", f"/api/tools/id:{first['id']}/undelete")
    assert restored.status_code == 200, restored.text
    assert restored.json()["name"] == "reader"
    assert restored.json()["enabled"] is True
    run = kiln_server.api("POST", "/api/tools/reader/run", json={"arguments": {}}).json()
    assert run["stdout"].strip() == "kiln"
    again = kiln_server.api("POST", f"/api/tools/id:{first['id']}/undelete")
    assert again.status_code == 409
    assert again.json()["error"]["message"] == (
        "tool 'reader' is not deleted; there is nothing to restore"
    )

    kiln_server.api("DELETE", "/api/tools/reader")
    kiln_server.api("POST", "/api/tools", json={**TOOL, "description": "A newcomer."})
    taken = kiln_server.api("POST", f"/api/tools/id:{first['id']}/undelete")
    assert taken.status_code == 409
    assert taken.json()["error"]["message"] == (
        "name: a live tool is now named 'reader'; rename or delete it first, then restore this one"
    )
