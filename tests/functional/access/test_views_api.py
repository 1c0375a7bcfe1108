"""REST for views and the ledger, and the `kiln views` / `kiln calls` commands that use it."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import AwsStack
from kiln.accounting.ledger import CallRecord, new_id
from kiln.settings import Settings
from support.app import AUTHOR_KEY, RunningKiln, serve


@pytest.fixture
def kiln(aws: AwsStack, tmp_path: Path) -> Iterator[RunningKiln]:
    settings = Settings(
        table=aws.table, bucket=aws.bucket, endpoint_url=aws.endpoint_url, region="us-east-1",
        author_key=AUTHOR_KEY, bundle_cache_dir=tmp_path, bind_host="127.0.0.1",
        ledger_digest_key="test-digest-key",
    )  # fmt: skip
    for running in serve(settings, aws):
        tool = {"name": "hello", "description": "d", "language": "python",
                "code": "print('hi')\n", "tags": ["greeting"]}  # fmt: skip
        assert running.api("POST", "/api/tools", json=tool).status_code == 201
        yield running


def test_views_are_created_read_replaced_with_if_match_and_deleted(kiln: RunningKiln) -> None:
    body = {"name": "greet", "tools": ["tag:greeting", "hello@1"], "published": True}
    created = kiln.api("PUT", "/api/views/greet", json=body)
    assert created.status_code == 201, created.text
    assert created.headers["etag"] == '"1"'
    shown = kiln.api("GET", "/api/views/greet").json()
    assert shown["tools"] == ["tag:greeting", "hello@1"]
    hello = kiln.api("GET", "/api/tools/hello").json()["fingerprint"]
    assert shown["shows"] == [{"name": "hello", "revision": 1, "fingerprint": hello}]
    assert kiln.api("PUT", "/api/views/greet", json=body).status_code == 409
    stale = kiln.api("PUT", "/api/views/greet", json=body, headers={"If-Match": '"7"'})
    assert stale.status_code == 412
    assert stale.json()["error"]["current_revision"] == 1
    replaced = kiln.api("PUT", "/api/views/greet", json={**body, "tools": []},
                        headers={"If-Match": '"1"'})  # fmt: skip
    assert replaced.status_code == 200
    assert replaced.json()["revision"] == 2
    assert [v["name"] for v in kiln.api("GET", "/api/views").json()["views"]] == ["greet"]
    assert kiln.api("DELETE", "/api/views/greet").status_code == 200
    assert kiln.api("GET", "/api/views/greet").status_code == 404


def test_a_bad_view_is_refused_naming_each_field(kiln: RunningKiln) -> None:
    refused = kiln.api("POST", "/api/views", json={"name": "Bad", "tools": ["x@0"]})
    assert refused.status_code == 422
    fields = [p["field"] for p in refused.json()["error"]["problems"]]
    assert fields == ["name", "tools[0]"]


def test_views_and_calls_need_an_author_key(kiln: RunningKiln) -> None:
    for path in ("/api/views", "/api/calls", "/api/calls/totals"):
        assert kiln.api("GET", path, key=None).status_code == 401


def test_tags_show_in_the_tool_listing(kiln: RunningKiln) -> None:
    (tool,) = kiln.api("GET", "/api/tools").json()["tools"]
    assert tool["tags"] == ["greeting"]


def test_bad_ledger_queries_name_the_parameter(kiln: RunningKiln) -> None:
    answer = kiln.api("GET", "/api/calls", params={"outcome": "fine"})
    assert answer.status_code == 400
    assert answer.json()["error"]["message"].startswith("outcome: must be one of")


def kiln_cli(kiln: RunningKiln, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"KILN_URL": kiln.url, "KILN_AUTHOR_KEY": AUTHOR_KEY, "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, "-m", "kiln.cli", *args], env=env,
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip


def test_kiln_views_and_kiln_calls_as_a_user_runs_them(kiln: RunningKiln, tmp_path: Path) -> None:
    view_file = tmp_path / "greet.view.json"
    view_file.write_text(json.dumps({"tools": ["hello"], "published": True}))
    put = kiln_cli(kiln, "views", "put", str(view_file))
    assert (put.returncode, put.stdout.split()) == (0, ["created", "greet"]), put.stderr
    assert kiln_cli(kiln, "views", "put", str(view_file)).stdout.split() == ["unchanged", "greet"]
    listing = kiln_cli(kiln, "views", "ls").stdout
    assert "greet" in listing
    assert "/mcp/v/greet" in listing
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "hello", "arguments": {}}}  # fmt: skip
    assert kiln.mcp(call, path="/mcp/v/greet").status_code == 401  # published, not anonymous
    assert kiln.mcp(call, headers={"Authorization": f"Bearer {AUTHOR_KEY}"},
                    path="/mcp/v/greet").status_code == 200  # fmt: skip
    calls = kiln_cli(kiln, "calls", "--tool", "hello", "--json")
    assert calls.returncode == 0, calls.stderr
    (entry,) = [json.loads(line) for line in calls.stdout.splitlines()]
    assert (entry["caller"], entry["view"], entry["outcome"]) == ("key:author", "greet", "ok")
    totals = kiln_cli(kiln, "calls", "--totals", entry["at"][:10])
    assert "key:author" in totals.stdout
    assert "hello" in totals.stdout
    bad = kiln_cli(kiln, "views", "put", str(tmp_path / "missing.view.json"))
    assert bad.returncode == 1
    assert kiln_cli(kiln, "views", "rm", "greet").returncode == 0


def test_kiln_tools_push_and_pull_carry_view_files_beside_tool_folders(
    kiln: RunningKiln, tmp_path: Path
) -> None:
    source = tmp_path / "src"
    (source / "shout").mkdir(parents=True)
    (source / "shout" / "tool.json").write_text(json.dumps({"description": "d", "tags": ["loud"]}))
    (source / "shout" / "main.py").write_text("print('HI')\n")
    (source / "loud.view.json").write_text(json.dumps({"tools": ["tag:loud", "hello@1"]}))
    pushed = kiln_cli(kiln, "tools", "push", str(source))
    assert pushed.returncode == 0, pushed.stderr
    assert "created   shout" in pushed.stdout
    assert "created   view loud" in pushed.stdout
    assert [
        (t["name"], t["revision"]) for t in kiln.api("GET", "/api/views/loud").json()["shows"]
    ] == [
        ("hello", 1),
        ("shout", 1),
    ]
    pulled = kiln_cli(kiln, "tools", "pull", str(tmp_path / "out"))
    assert pulled.returncode == 0, pulled.stderr
    written = json.loads((tmp_path / "out" / "loud.view.json").read_text())
    assert written["tools"] == ["tag:loud", "hello@1"]
    assert json.loads((tmp_path / "out" / "shout" / "tool.json").read_text())["tags"] == ["loud"]


def test_a_call_refused_for_its_arguments_is_in_the_ledger_as_a_tool_error(
    kiln: RunningKiln,
) -> None:
    arguments = {"unexpected": "planted-value-123"}
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "hello", "arguments": arguments}}  # fmt: skip
    answer = kiln.mcp(call, headers={"Authorization": f"Bearer {AUTHOR_KEY}"})
    assert answer.json()["result"]["isError"] is True
    (entry,) = kiln.api("GET", "/api/calls").json()["calls"]
    assert (entry["tool"], entry["revision"], entry["outcome"]) == ("hello", 1, "tool_error")
    assert entry["args_digest"].startswith("hmac-sha256:")
    assert "planted-value-123" not in json.dumps(entry)


def seed_call_tree(kiln: RunningKiln) -> dict[str, str]:
    """An outer call `job` with two inner calls (the second with one of its own), a call
    whose outer call is not in the ledger, and a plain call before them all."""
    ledger = kiln.kiln.gate.ledger
    assert ledger is not None
    ids = {name: new_id() for name in ("job", "fx_rate", "convert", "lookup", "lost")}
    t0 = ledger.now() - 60
    plan = [("hello", -1.0, None, 5.0), ("job", 0.0, None, 900.0),
            ("fx_rate", 0.1, "job", 50.0), ("convert", 0.2, "job", 300.0),
            ("lookup", 0.25, "convert", 20.0), ("format", 1.0, "lost", 10.0)]  # fmt: skip
    for tool, offset, parent, duration in plan:
        entry = CallRecord(at="", caller="key:ci", tool=tool, outcome="ok", revision=1,
                           duration_ms=duration, id=ids.get(tool, ""),
                           parent=ids[parent] if parent else None)  # fmt: skip
        ledger.record(entry, started=t0 + offset)
    return ids


def tool_column(listing: subprocess.CompletedProcess[str]) -> list[str]:
    assert listing.returncode == 0, listing.stderr
    header, *rows = listing.stdout.splitlines()
    start, end = header.index("TOOL"), header.index("OUTCOME")
    return [row[start:end].rstrip() for row in rows]


def test_kiln_calls_draws_inner_calls_under_their_outer_call_and_marks_orphans(
    kiln: RunningKiln,
) -> None:
    ids = seed_call_tree(kiln)
    assert tool_column(kiln_cli(kiln, "calls")) == [
        f"↳ {ids['lost']} format@1",
        "job@1",
        "├─ fx_rate@1",
        "└─ convert@1",
        "   └─ lookup@1",
        "hello@1",
    ]
    assert tool_column(kiln_cli(kiln, "calls", "--limit", "2")) == [
        f"↳ {ids['lost']} format@1",
        f"↳ {ids['convert']} lookup@1",
    ]
    listed = kiln_cli(kiln, "calls", "--json")
    parents = {e["tool"]: e["parent"] for e in map(json.loads, listed.stdout.splitlines())}
    assert parents == {"format": ids["lost"], "lookup": ids["convert"], "convert": ids["job"],
                       "fx_rate": ids["job"], "job": None, "hello": None}  # fmt: skip


def test_kiln_calls_tree_shows_a_call_and_every_call_inside_it(kiln: RunningKiln) -> None:
    ids = seed_call_tree(kiln)
    tree = kiln_cli(kiln, "calls", "--tree", ids["job"])
    assert tool_column(tree) == ["job@1", "├─ fx_rate@1", "└─ convert@1", "   └─ lookup@1"]
    assert tree.stdout.splitlines()[1].endswith(ids["job"])
    inner = kiln_cli(kiln, "calls", "--tree", ids["convert"])
    assert tool_column(inner) == [f"↳ {ids['job']} convert@1", "└─ lookup@1"]
    unknown = kiln_cli(kiln, "calls", "--tree", "0" * 12)
    assert (unknown.returncode, unknown.stdout) == (1, ""), unknown.stdout
    assert "no call 000000000000 nor any call inside it found" in unknown.stderr
    narrowed = kiln_cli(kiln, "calls", "--tree", ids["job"], "--tool", "job", "--limit", "2")
    assert (narrowed.returncode, narrowed.stdout) == (2, ""), narrowed.stdout
    assert "--tool, --limit cannot be used with it" in narrowed.stderr
    bad = kiln_cli(kiln, "calls", "--tree", "job")
    assert bad.returncode == 1
    assert "HTTP 400: parent: must be a call id, 12 lowercase hex digits" in bad.stderr


def test_the_ledger_api_finds_inner_calls_by_parent(kiln: RunningKiln) -> None:
    ids = seed_call_tree(kiln)
    found = kiln.api("GET", "/api/calls", params={"parent": ids["job"]})
    assert found.status_code == 200, found.text
    assert [(e["tool"], e["parent"]) for e in found.json()["calls"]] == [
        ("convert", ids["job"]), ("fx_rate", ids["job"])]  # fmt: skip
    bad = kiln.api("GET", "/api/calls", params={"parent": "JOB"})
    assert bad.status_code == 400
    assert bad.json()["error"]["message"] == "parent: must be a call id, 12 lowercase hex digits"
