"""`kiln tools ls | show | history` show each tool's fingerprint as tools/list lists it."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from support.devserver import DevServer, kiln_dev

KEY = "dev.kiln/fingerprint"


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    with kiln_dev(tmp_path_factory.mktemp("cli-fingerprint"), "--no-examples") as server:
        yield server


def ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def tool(text: str) -> dict[str, Any]:
    return {"name": "fp", "description": "d", "language": "python", "code": f"print({text!r})\n"}


def listed(dev: DevServer) -> str:
    body = dev.mcp("tools/list").json()
    return str({t["name"]: t["_meta"][KEY] for t in body["result"]["tools"]}["fp"])


def test_ls_show_and_history_print_the_fingerprint_clients_are_listed(dev: DevServer) -> None:
    assert dev.api("POST", "/api/tools", json=tool("one")).status_code == 201
    first = listed(dev)
    again = dev.api("PUT", "/api/tools/fp", json=tool("two"), headers={"If-Match": '"1"'})
    assert again.status_code == 200, again.text
    second = listed(dev)
    assert first != second

    line = next(x for x in ok(dev.kiln("tools", "ls")).splitlines() if x.startswith("fp "))
    assert second[:19] in line.split(), line
    shown = ok(dev.kiln("tools", "show", "fp"))
    assert f"fingerprint:  {second}\n" in shown, shown
    assert json.loads(ok(dev.kiln("tools", "show", "fp", "--json")))["fingerprint"] == second
    history = ok(dev.kiln("tools", "history", "fp")).splitlines()
    assert [line.split()[0] for line in history] == ["r2", "r1"]
    assert second in history[0].split(), history
    assert first in history[1].split(), history
    missing = dev.kiln("tools", "show", "nope")
    assert missing.returncode == 1, missing
    assert "no tool is named 'nope'" in missing.stderr, missing.stderr
