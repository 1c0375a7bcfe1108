"""Host and Origin are checked once per request, in one place (`kiln.api.middleware`), with one
wording (`kiln.protocol.guard`): every MCP path answers a JSON-RPC error, every other path the
API's error body, both with the same text."""

from __future__ import annotations

import pytest

from kiln.protocol.guard import FORBIDDEN_ORIGIN, MISDIRECTED
from support.app import RunningKiln

PING = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
MCP_PATHS = ["/mcp", "/admin/mcp", "/mcp/v/any", "/mcp/below", "/admin/mcp/below"]
FOREIGN = [
    ({"Origin": "https://evil.example"}, 403, FORBIDDEN_ORIGIN),
    ({"Host": "evil.example"}, 421, MISDIRECTED),
]


def test_the_endpoints_kiln_builds_leave_host_and_origin_to_the_edge(
    kiln_server: RunningKiln,
) -> None:
    # The app's middleware refuses a foreign Host or Origin before any route runs; an endpoint
    # that checked them again would do the same work twice on every request.
    for name in ("endpoint", "admin_endpoint"):
        settings = getattr(kiln_server.kiln, name).settings
        assert settings.check_origin is False, f"Kiln.{name} checks Host and Origin a second time"


@pytest.mark.parametrize(("headers", "status", "text"), FOREIGN)
@pytest.mark.parametrize("path", MCP_PATHS)
def test_every_mcp_path_refuses_with_one_json_rpc_wording(
    kiln_server: RunningKiln, path: str, headers: dict[str, str], status: int, text: str
) -> None:
    answer = kiln_server.mcp(PING, headers=headers, path=path)
    assert answer.status_code == status, answer.text
    body = answer.json()
    assert body.get("jsonrpc") == "2.0", f"{path}: not a JSON-RPC answer: {answer.text}"
    assert body["error"] == {"code": -32600, "message": text}, path


@pytest.mark.parametrize(("headers", "status", "text"), FOREIGN)
def test_other_paths_refuse_with_the_same_text_in_the_api_body(
    kiln_server: RunningKiln, headers: dict[str, str], status: int, text: str
) -> None:
    answer = kiln_server.api("GET", "/api/tools", key=None, headers=headers)
    assert answer.status_code == status, answer.text
    assert answer.json()["error"]["message"] == text
