"""The third-party yardsticks in ../shared/tools, run against a real Kiln server.

The official MCP conformance suite (both wires, with the fixture tools loaded) and three real
MCP clients. They install their own pinned toolchains into ~/.cache on first use.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import support.toolchain as toolchain
from support.app import McpServer, start_kiln

ROOT = Path(__file__).resolve().parents[3]
CACHE = Path(os.environ.get("MCP_YARDSTICK_CACHE", Path.home() / ".cache" / "mcp-yardsticks"))
# The last Python SDK line with the 2025-11-25 experimental tasks client (2.x removed it).
PY_SDK_TASKS = "1.30.0"
YARDSTICKS = Path(os.environ.get("KILN_YARDSTICKS", ROOT.parent / "shared" / "tools"))

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not (YARDSTICKS / "conformance.sh").is_file(),
        reason=(
            f"the yardsticks (conformance.sh and the client runners) are not at {YARDSTICKS}; "
            "to run these tests, point KILN_YARDSTICKS at a directory holding them, e.g. "
            "KILN_YARDSTICKS=/path/to/shared/tools .venv/bin/pytest tests/functional/"
            "test_yardsticks.py"
        ),
    ),
]


@pytest.fixture(scope="module")
def server(moto_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[McpServer]:
    yield from start_kiln(moto_endpoint, tmp_path_factory.mktemp("yardsticks"))


def run(
    *command: str | Path, timeout: float = 600, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(part) for part in command],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env=None if env is None else {**os.environ, **env},
    )


def test_the_official_conformance_suite_passes_every_applicable_scenario_on_both_wires(
    server: McpServer, tmp_path: Path
) -> None:
    # 17 + 27 scenarios on the two wires (progress, logging, sampling, elicitation and the
    # input_required fixtures of talk-back among them), and the 9 of the tasks-extension leg
    # (SEP-2663, with tasks-mrtr-input and tasks-mrtr-composition), which runs because
    # slow_compute is listed (examples/conformance holds every fixture as a tool folder).
    done = run("bash", YARDSTICKS / "conformance.sh", server.url, tmp_path / "out")
    lines = done.stdout.strip().splitlines()
    assert lines, done.stderr[-3000:]
    assert "-- tasks-extension" in done.stdout, done.stdout[-3000:]
    assert lines[-1] == "conformance: 53 passed, 0 failed of 53", done.stdout[-3000:]


SHOWN = {
    "search": {"search_tools", "describe_tools", "call_tool"},
    "code": {"search_tools", "describe_tools", "execute"},
}


@pytest.fixture(scope="module", params=sorted(SHOWN))
def meta_server(
    request: pytest.FixtureRequest, moto_endpoint: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[McpServer]:
    mode = request.param
    yield from start_kiln(
        moto_endpoint, tmp_path_factory.mktemp(f"yardsticks-{mode}"), catalog_mode=mode
    )


def test_the_meta_tools_of_search_and_code_mode_pass_the_suites_tool_checks_on_both_wires(
    meta_server: McpServer, tmp_path: Path
) -> None:
    # In search mode tools/list shows search_tools, describe_tools and call_tool, in code mode
    # search_tools, describe_tools and execute: the suite's scenarios for any tools-only
    # server (tools-list checks each listed tool) run on them. Its fixture and tasks scenarios
    # call the test_* tools by name, which both modes still answer (a direct call is a call):
    # told to run them all, all pass but the one that reads a fixture's schema from
    # tools/list (json-schema-2020-12), which these modes by design do not list
    # (describe_tools gives it).
    listed = meta_server.legacy("tools/list").json()["result"]["tools"]
    assert {t["name"] for t in listed} in SHOWN.values(), listed
    done = run(
        "bash", YARDSTICKS / "conformance.sh", meta_server.url, tmp_path / "out",
        env={"CONFORMANCE_FIXTURES": "all", "CONFORMANCE_TASKS": "all"},
    )  # fmt: skip
    lines = done.stdout.strip().splitlines()
    assert lines, done.stderr[-3000:]
    assert "pass tools-list" in done.stdout, done.stdout[-3000:]
    failed = [line.split()[1] for line in lines if line.strip().startswith("fail ")]
    assert failed == ["json-schema-2020-12"] * 2, (lines[-1], failed)  # once on each wire
    assert "Tool 'json_schema_2020_12_tool' not found" in done.stdout
    assert lines[-1].startswith("conformance: "), done.stdout[-3000:]
    assert lines[-1] == "conformance: 51 passed, 2 failed of 53", lines[-1]


@pytest.mark.parametrize("client", ["py", "ts", "inspector"])
def test_a_real_mcp_client_lists_and_calls_add_vat(server: McpServer, client: str) -> None:
    done = run(
        "bash",
        YARDSTICKS / "probe.sh",
        client,
        server.url,
        "--tool",
        "add_vat",
        "--args",
        '{"net": 99.99}',
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "119.99" in done.stdout


@pytest.fixture(scope="module")
def sdk_with_tasks() -> Path:
    """A virtualenv (in the yardstick cache) with the Python SDK that still speaks core tasks."""
    return toolchain.python_venv(CACHE / f"py-mcp-{PY_SDK_TASKS}", f"mcp=={PY_SDK_TASKS}")


def test_the_python_sdk_runs_a_2025_11_25_task_creates_polls_and_gets_the_result(
    server: McpServer, sdk_with_tasks: Path
) -> None:
    script = ROOT / "tests" / "functional" / "clients" / "sdk_tasks_client.py"
    arguments = '{"seconds": 1, "label": "sdk"}'
    done = run(sdk_with_tasks, script, server.url, "slow_compute", arguments, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    flow = json.loads(done.stdout)
    assert flow["protocol"] == "2025-11-25"
    assert flow["tasks_capability"] is True
    assert flow["created"] == "working"
    assert flow["statuses"][-1] == "completed"
    assert flow["result"]["content"] == [{"type": "text", "text": "sdk: computed after 1 s"}]
    related = flow["result"]["_meta"]["io.modelcontextprotocol/related-task"]
    assert related == {"taskId": flow["task_id"]}


PY_SDK = "2.3.0"  # the official Python SDK client that speaks 2026-07-28 (input_required rounds)
TS_SDK = "1.32.2"  # the TypeScript SDK client: 2025-11-25, server requests on the event stream


@pytest.fixture(scope="module")
def sdk_2() -> Path:
    """A virtualenv (in the yardstick cache) with the Python SDK 2.x client."""
    return toolchain.python_venv(CACHE / f"py-mcp-{PY_SDK}", f"mcp=={PY_SDK}")


def check_talk(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    seen: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["elicited"] == ["Who are you?"]
    assert seen["sampled"] == ["Capital of France?"]
    assert seen["results"]["test_elicitation"] == [
        False,
        'User response: action=accept, content={"username": "ada", "email": "a@x"}',
    ]
    assert seen["results"]["test_sampling"] == [False, "LLM response: Paris"]
    assert seen["results"]["test_tool_with_progress"] == [False, "Progress test completed"]
    assert seen["progress"] == [0, 50, 100]
    return seen


@pytest.mark.parametrize("mode", ["2026-07-28", "legacy"])
def test_the_python_sdk_2_client_answers_a_tools_questions_through_its_callbacks(
    server: McpServer, sdk_2: Path, mode: str
) -> None:
    """2026-07-28: input_required rounds; legacy: requests on the held event stream."""
    script = ROOT / "tests" / "functional" / "clients" / "sdk_talk_client.py"
    seen = check_talk(run(sdk_2, script, server.url, mode, timeout=120))
    assert seen["protocol"] == ("2026-07-28" if mode == "2026-07-28" else "2025-11-25")


def test_the_typescript_sdk_client_answers_a_tools_questions_through_its_handlers(
    server: McpServer, tmp_path: Path
) -> None:
    folder = CACHE / f"ts-sdk-{TS_SDK}"
    if not (folder / "node_modules").is_dir():
        installed = run("npm", "install", "--prefix", folder, f"@modelcontextprotocol/sdk@{TS_SDK}")
        assert installed.returncode == 0, installed.stderr[-3000:]
    script = folder / "kiln_ts_talk_client.mjs"  # bare imports resolve next to the script
    shutil.copyfile(ROOT / "tests" / "functional" / "clients" / "ts_talk_client.mjs", script)
    check_talk(run("node", script, server.url, timeout=120))
