"""What a new user met on `kiln dev` (issue 26): commands and messages, each with its test."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.devserver import DEV_KEY, MODERN, DevServer, kiln_dev


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    root = tmp_path_factory.mktemp("findings")
    tools = root / "tools"
    for name in ("ping", "a_tool_with_a_rather_long_name_for_a_column"):
        (tools / name).mkdir(parents=True)
        (tools / name / "tool.json").write_text(json.dumps({"description": "d"}))
        (tools / name / "main.py").write_text("print('pong')\n")
    with kiln_dev(root / "state", "--no-examples", "--tools", str(tools)) as server:
        yield server


def test_views_ls_with_no_views_says_so_and_how_to_make_one(dev: DevServer) -> None:
    listed = dev.kiln("views", "ls")
    assert listed.returncode == 0, listed.stderr
    assert "no views yet" in listed.stdout
    assert "kiln views put" in listed.stdout


def test_keys_bind_changes_a_keys_view_and_quotas_and_keys_ls_shows_them(
    dev: DevServer,
) -> None:
    dev.create_key("binder")
    bound = dev.kiln("keys", "bind", "binder", "--calls-per-minute", "7",
                     "--run-seconds-per-day", "90")  # fmt: skip
    assert bound.returncode == 0, bound.stderr
    assert "7 calls/min" in bound.stdout
    assert "Traceback" not in bound.stderr
    listed = dev.kiln("keys", "ls")
    assert listed.returncode == 0, listed.stderr
    (row,) = [line for line in listed.stdout.splitlines() if line.startswith("binder ")]
    assert row.endswith("7 calls/min, 90 run-s/day")


def test_calls_columns_stay_in_line_with_long_tool_names(dev: DevServer) -> None:
    for name in ("ping", "a_tool_with_a_rather_long_name_for_a_column"):
        assert dev.mcp("tools/call", {"name": name, "arguments": {}}).status_code == 200
    listed = dev.kiln("calls", "--limit", "2")
    assert listed.returncode == 0, listed.stderr
    header, *rows = listed.stdout.splitlines()
    assert len(rows) == 2
    at = header.index("OUTCOME")
    assert all(row[at:].startswith("ok ") for row in rows), listed.stdout


def test_a_disabled_tool_is_named_disabled_to_its_author_and_unknown_to_others(
    dev: DevServer,
) -> None:
    assert dev.api("POST", "/api/tools/ping/disable").status_code == 200
    try:
        author = dev.mcp("tools/call", {"name": "ping", "arguments": {}}, key=DEV_KEY)
        assert "Tool 'ping' is disabled" in author.json()["error"]["message"], author.text
        assert "enable" in author.json()["error"]["message"]
        anonymous = dev.mcp("tools/call", {"name": "ping", "arguments": {}})
        assert anonymous.json()["error"]["message"] == "Unknown tool: ping"
    finally:
        assert dev.api("POST", "/api/tools/ping/enable").status_code == 200


def test_a_missing_mcp_name_header_says_what_it_must_carry(dev: DevServer) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "ping", "arguments": {},
                       "_meta": {"io.modelcontextprotocol/protocolVersion": MODERN,
                                 "io.modelcontextprotocol/clientCapabilities": {}}}}  # fmt: skip
    headers = {"MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/call",
               "Accept": "application/json, text/event-stream"}  # fmt: skip
    answer = dev.http.post(dev.url + "/mcp", json=body, headers=headers)
    message = answer.json()["error"]["message"]
    assert "required header Mcp-Name is missing" in message
    assert "params.name of tools/call: 'ping'" in message


def test_a_404_on_an_mcp_path_is_written_as_every_other_answer(dev: DevServer) -> None:
    answer = dev.http.post(dev.url + "/mcp/v/nowhere", json={})
    assert answer.status_code == 404
    assert answer.content == json.dumps(answer.json(), separators=(",", ":")).encode()


def test_put_without_if_match_is_428_even_with_a_body_that_lacks_a_name(dev: DevServer) -> None:
    answer = dev.api("PUT", "/api/tools/ping", json={"description": "no name"})
    assert answer.status_code == 428, answer.text


def test_restoring_the_current_revision_makes_no_new_revision(dev: DevServer) -> None:
    head = dev.api("GET", "/api/tools/ping").json()["revision"]
    restored = dev.api("POST", f"/api/tools/ping/revisions/{head}/restore",
                       headers={"If-Match": f'"{head}"'})  # fmt: skip
    assert restored.status_code == 200, restored.text
    assert restored.json()["revision"] == head
    assert len(dev.api("GET", "/api/tools/ping/revisions").json()["revisions"]) == head


def test_kiln_dev_on_a_port_another_kiln_dev_holds_says_so(dev: DevServer, tmp_path: Path) -> None:
    port = dev.url.rpartition(":")[2]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "KILN_"))}
    done = subprocess.run(
        [sys.executable, "-m", "kiln.cli", "dev", "--port", port, "--no-examples",
         "--state-dir", str(tmp_path / "other")],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 1
    assert "in use by another kiln dev" in done.stderr, done.stderr


def test_bundle_builds_written_to_dist_are_not_left_untracked() -> None:
    """The README's `kiln bundles build --out dist/` wrote into the clone, unignored."""
    root = Path(__file__).resolve().parents[3]
    ignored = subprocess.run(["git", "-C", str(root), "check-ignore", "-q", "dist/x.zip"],
                             check=False)  # fmt: skip
    assert ignored.returncode == 0
