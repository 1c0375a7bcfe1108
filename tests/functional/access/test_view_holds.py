"""Views and breaking revisions: a pin keeps its revision; a view that follows a tool takes a
breaking revision only once its owner accepts it, serving the one before meanwhile.

Real HTTP into the app on the emulator; what a view serves is read from MCP `tools/list` on
its own published path, and from `GET /api/views/{name}` (`shows`, `pending`).
"""

from __future__ import annotations

from typing import Any

import httpx

from support.app import RunningKiln

LEGACY = {"mcp-protocol-version": "2025-11-25"}
CITY = {"type": "object", "properties": {"city": {"type": "string"}}}
TOOL = {"name": "weather", "description": "Weather.", "language": "python",
        "code": "print('sun')\n", "input_schema": CITY, "tags": ["wx"]}  # fmt: skip
STRICT = {**CITY, "required": ["city"]}  # a new required input: breaking


def ok(response: httpx.Response, status: int = 200) -> dict[str, Any]:
    assert response.status_code == status, f"{response.request.url.path}: {response.text}"
    return dict(response.json())


def save(kiln: RunningKiln, head: int, **changes: Any) -> dict[str, Any]:
    body = {**TOOL, **changes}
    return ok(kiln.api("PUT", "/api/tools/weather", json=body, headers={"If-Match": f'"{head}"'}))


def view(kiln: RunningKiln, name: str, *tools: str) -> None:
    body = {"name": name, "tools": list(tools), "published": True, "anonymous": True}
    ok(kiln.api("POST", "/api/views", json=body), 201)


def served(kiln: RunningKiln, name: str) -> dict[str, Any]:
    """The weather tool as the view's MCP path lists it."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    listed = ok(kiln.mcp(body, headers=LEGACY, path=f"/mcp/v/{name}"))["result"]["tools"]
    return next(tool for tool in listed if tool["name"] == "weather")


def shows(kiln: RunningKiln, name: str) -> tuple[int, list[dict[str, Any]]]:
    body = ok(kiln.api("GET", f"/api/views/{name}"))
    return body["shows"][0]["revision"], body["pending"]


def test_a_breaking_revision_waits_for_the_owner_of_a_following_view(
    kiln_server: RunningKiln,
) -> None:
    ok(kiln_server.api("POST", "/api/tools", json=TOOL), 201)
    view(kiln_server, "pinned", "weather@1")
    view(kiln_server, "follows", "weather")
    view(kiln_server, "tagged", "tag:wx")
    save(kiln_server, 1, description="Weather, in words.")  # r2: compatible
    assert shows(kiln_server, "follows") == (2, [])
    save(kiln_server, 2, input_schema=STRICT, breaking=True)  # r3: breaking

    assert shows(kiln_server, "pinned") == (1, [])
    for name in ("follows", "tagged"):
        revision, pending = shows(kiln_server, name)
        assert revision == 2, f"{name} took the breaking r3 without its owner: {pending}"
        assert [(p["tool"], p["held"], p["serving"]) for p in pending] == [("weather", 3, 2)]
        assert pending[0]["findings"][0]["kind"] == "required-input", pending
        assert pending[0]["accept"] == f"kiln views accept {name} weather"
        assert "required" not in served(kiln_server, name)["inputSchema"]
    listed = ok(kiln_server.api("GET", "/api/views"))["views"]
    assert {v["name"]: len(v["pending"]) for v in listed} == {"follows": 1, "pinned": 0,
                                                              "tagged": 1}  # fmt: skip

    accepted = ok(kiln_server.api("POST", "/api/views/follows/accept", json={"tool": "weather"}))
    assert accepted["accepted"] == {"tool": "weather", "revision": 3}, accepted
    assert shows(kiln_server, "follows") == (3, [])
    assert served(kiln_server, "follows")["inputSchema"]["required"] == ["city"]
    assert shows(kiln_server, "tagged")[0] == 2, "accepting for one view accepted for another"

    # A later compatible save is taken at once; the next breaking one waits again.
    save(kiln_server, 3, input_schema=STRICT, description="Weather now.")
    assert shows(kiln_server, "follows") == (4, [])
    save(kiln_server, 4, input_schema=STRICT, annotations={"openWorldHint": False})
    assert shows(kiln_server, "follows") == (5, [])  # stronger annotations: not breaking
    save(kiln_server, 5, input_schema=STRICT, breaking=True)  # openWorld back to open
    revision, pending = shows(kiln_server, "follows")
    assert (revision, pending[0]["held"]) == (5, 6), pending


def test_a_view_made_after_a_breaking_revision_serves_it(kiln_server: RunningKiln) -> None:
    ok(kiln_server.api("POST", "/api/tools", json=TOOL), 201)
    save(kiln_server, 1, input_schema=STRICT, breaking=True)
    view(kiln_server, "later", "weather")
    assert shows(kiln_server, "later") == (2, [])
    view_body = ok(kiln_server.api("GET", "/api/views/later"))
    again = {k: view_body[k] for k in ("name", "tools", "published", "anonymous")}
    ok(kiln_server.api("PUT", "/api/views/later", json={**again, "description": "d"},
                       headers={"If-Match": f'"{view_body["revision"]}"'}))  # fmt: skip
    assert shows(kiln_server, "later") == (2, []), "re-saving a view forgot what it had seen"


def test_accept_names_a_tool(kiln_server: RunningKiln) -> None:
    view(kiln_server, "empty", "weather")
    refused = kiln_server.api("POST", "/api/views/empty/accept", json={})
    assert refused.status_code == 422, refused.text
    assert refused.json()["error"]["problems"][0]["field"] == "tool", refused.text
    missing = kiln_server.api("POST", "/api/views/empty/accept", json={"tool": "nope"})
    assert missing.status_code == 404, missing.text
