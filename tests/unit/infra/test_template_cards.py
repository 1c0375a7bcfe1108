"""template.yaml routes the server cards and their catalog to the public function."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from cfnlint.decode import decode

from kiln.protocol.card_paths import CATALOG_PATH, PUBLIC_CARD_PATH

TEMPLATE = Path(__file__).resolve().parents[3] / "template.yaml"


def routed(events: dict[str, Any], path: str, method: str) -> list[str]:
    """The events of a function whose HTTP API route takes `method` on `path`."""
    found = []
    for name, event in events.items():
        if event["Type"] != "HttpApi":
            continue
        route = event["Properties"]
        pattern = re.escape(route["Path"])
        pattern = re.sub(r"\\\{[^/]+?\\\+\\\}", ".+", pattern)  # {proxy+}
        pattern = re.sub(r"\\\{[^/]+?\\\}", "[^/]+", pattern)  # {view}
        if re.fullmatch(pattern, path) and route["Method"] in ("ANY", method):
            found.append(name)
    return found


@pytest.mark.parametrize("path", [CATALOG_PATH, PUBLIC_CARD_PATH, "/mcp/v/finance/server-card"])
@pytest.mark.parametrize("method", ["GET", "HEAD", "OPTIONS"])
def test_a_card_request_reaches_the_public_function_and_only_it(path: str, method: str) -> None:
    data, problems = decode(str(TEMPLATE))
    assert not problems, problems
    assert data is not None
    functions = {
        name: resource["Properties"].get("Events", {})
        for name, resource in data["Resources"].items()
        if resource["Type"] == "AWS::Serverless::Function"
    }
    reached = {name for name, events in functions.items() if routed(events, path, method)}
    assert reached == {"McpFunction"}, f"{method} {path} reaches {reached or 'no function'}"
