"""What a new user met on `kiln dev` (issue 26): commands and messages, each with its test."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from dev_helpers import DevServer, kiln_dev


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
