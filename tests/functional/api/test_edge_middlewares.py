"""Each middleware of the edge (`kiln.api.middleware`) acts on /mcp and /admin/mcp as on /api,
over real HTTP: the MCP endpoints are served ahead of the router (`kiln.api.mcp.AheadOfRouter`)
but inside every middleware, so each behaviour below fails if one is skipped on the common path
(a plain POST /mcp, no Origin)."""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from conftest import AwsStack
from kiln.catalog.rules import check_draft
from kiln.settings import Settings
from support.app import AUTHOR_KEY, RunningKiln, serve

ORIGIN = "https://app.example"
LIST = {"jsonrpc": "2.0", "id": 7, "method": "tools/list", "params": {}}
MCP = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


@pytest.fixture(params=["kiln dev's app", "the public function's app"])
def server(
    request: pytest.FixtureRequest, kiln_settings: Settings, aws: AwsStack
) -> Iterator[RunningKiln]:
    settings = kiln_settings.with_(allowed_origins=(ORIGIN,))
    yield from serve(settings, aws, public_only=request.param != "kiln dev's app")


def has_api(server: RunningKiln) -> bool:
    return server.http.get(server.url + "/api/health").status_code == 200


def fill(server: RunningKiln, tools: int) -> None:
    for index in range(tools):
        draft = {"name": f"tool_{index:02d}", "language": "python", "code": "print(1)\n",
                 "description": f"Tool number {index}, listed to fill a page."}  # fmt: skip
        server.kiln.store.create(check_draft(draft), actor="test")


def raw(server: RunningKiln, method: str, path: str, **kw: Any) -> httpx.Response:
    """The bytes as sent: httpx would decode a gzip body without saying so."""
    with server.http.stream(method, server.url + path, **kw) as response:
        response.raw = b"".join(response.iter_raw())  # type: ignore[attr-defined]
        return response


def test_cors_preflight_and_headers_on_mcp_and_api(server: RunningKiln) -> None:
    paths = ["/mcp", "/api/tools"] if has_api(server) else ["/mcp"]
    for path in paths:
        ask = {"Origin": ORIGIN, "Access-Control-Request-Method": "POST",
               "Access-Control-Request-Headers": "Authorization, Content-Type"}  # fmt: skip
        preflight = server.http.options(server.url + path, headers=ask)
        assert preflight.status_code == 200, f"{path}: {preflight.status_code} {preflight.text}"
        assert preflight.headers["access-control-allow-origin"] == ORIGIN, preflight.headers
        assert "POST" in preflight.headers["access-control-allow-methods"], preflight.headers
        assert "authorization" in preflight.headers["access-control-allow-headers"].lower()
    called = server.http.post(server.url + "/mcp", json=LIST, headers={**MCP, "Origin": ORIGIN})
    assert called.status_code == 200, called.text
    assert called.headers["access-control-allow-origin"] == ORIGIN, called.headers
    assert "WWW-Authenticate" in called.headers["access-control-expose-headers"], called.headers
    plain = server.http.post(server.url + "/mcp", json=LIST, headers=MCP)
    assert "access-control-allow-origin" not in plain.headers, plain.headers
    # CORS names Origin in Vary for every answer: a cache must not give this one to a browser.
    assert "Origin" in plain.headers["vary"], plain.headers
    if has_api(server):
        listed = server.api("GET", "/api/tools", headers={"Origin": ORIGIN})
        assert listed.headers["access-control-allow-origin"] == ORIGIN, listed.headers


@pytest.mark.parametrize("origin", [None, ORIGIN])
def test_gzip_on_mcp_and_api_for_a_client_that_asks(
    server: RunningKiln, origin: str | None
) -> None:
    fill(server, 30)  # a page over gzip's minimum size
    extra = {"Origin": origin} if origin else {}
    for coding in ("gzip", "identity"):
        headers = {**MCP, **extra, "Accept-Encoding": coding}
        answer = raw(server, "POST", "/mcp", json=LIST, headers=headers)
        body: bytes = answer.raw  # type: ignore[attr-defined]
        if coding == "gzip":
            assert answer.headers.get("content-encoding") == "gzip", answer.headers
            body = gzip.decompress(body)
        else:
            assert "content-encoding" not in answer.headers, answer.headers
        assert b'"tool_29"' in body, body[:200]
        assert "Accept-Encoding" in answer.headers["vary"], answer.headers
    if has_api(server):
        headers = {**extra, "Accept-Encoding": "gzip", "Authorization": "Bearer " + AUTHOR_KEY}
        listed = raw(server, "GET", "/api/tools", headers=headers)
        assert listed.headers.get("content-encoding") == "gzip", listed.headers
        assert b'"tool_29"' in gzip.decompress(listed.raw)  # type: ignore[attr-defined]


def test_the_error_handler_answers_json_on_mcp_and_api(server: RunningKiln) -> None:
    below = server.http.post(server.url + "/mcp/below", json=LIST, headers=MCP)
    assert below.status_code == 404, below.text
    assert below.json()["error"]["code"] == -32601, below.text
    odd = server.http.request("FOO", server.url + "/mcp", headers=MCP)
    assert odd.status_code == 405, odd.text
    assert odd.json()["jsonrpc"] == "2.0", odd.text
    broken = server.http.post(server.url + "/mcp", content=b"{", headers=MCP)
    assert broken.json()["error"]["code"] == -32700, broken.text
    refused = server.http.post(
        server.url + "/mcp", json=LIST, headers={**MCP, "Authorization": "Bearer nope"}
    )
    assert refused.status_code == 401, refused.text
    assert "error" in refused.json(), refused.text
    assert "www-authenticate" in refused.headers, refused.headers
    if has_api(server):
        missing = server.api("GET", "/api/tools/no_such_tool")
        assert missing.status_code == 404, missing.text
        assert missing.json()["error"]["message"], missing.text
        bad = server.api("POST", "/api/tools", content=b"{", headers={"Content-Type": "x"})
        assert bad.status_code in (400, 415, 422), bad.text
        assert "error" in bad.json(), bad.text


def test_an_answer_names_what_it_varies_on_whatever_its_size(server: RunningKiln) -> None:
    """Decided: a client that does not accept gzip is handed its answer at once, with
    Accept-Encoding named in Vary even under gzip's minimum size (a cache learns nothing
    false); a client that accepts it gets Starlette's responder, which names it only on what
    it compresses."""
    fill(server, 2)  # a page under gzip's minimum size
    plain = raw(server, "POST", "/mcp", json=LIST, headers={**MCP, "Accept-Encoding": "identity"})
    assert plain.status_code == 200, plain.text
    assert plain.headers["vary"] == "Origin, Accept-Encoding", plain.headers
    asked = raw(server, "POST", "/mcp", json=LIST, headers={**MCP, "Accept-Encoding": "gzip"})
    assert "content-encoding" not in asked.headers, asked.headers
    assert asked.headers["vary"] == "Origin", asked.headers


def test_the_admin_endpoint_takes_the_same_edge(kiln_settings: Settings, aws: AwsStack) -> None:
    settings = kiln_settings.with_(allowed_origins=(ORIGIN,))
    for server in serve(settings, aws):
        fill(server, 30)
        author = {**MCP, "Authorization": "Bearer " + AUTHOR_KEY, "Accept-Encoding": "gzip"}
        listed = raw(server, "POST", "/admin/mcp", json=LIST, headers={**author, "Origin": ORIGIN})
        assert listed.status_code == 200, listed.raw  # type: ignore[attr-defined]
        assert listed.headers["access-control-allow-origin"] == ORIGIN, listed.headers
        assert listed.headers.get("content-encoding") == "gzip", listed.headers
        assert b'"tool_29"' in gzip.decompress(listed.raw)  # type: ignore[attr-defined]
        foreign = server.http.post(
            server.url + "/admin/mcp",
            json=LIST,
            headers={**author, "Origin": "https://evil.example"},
        )
        assert foreign.status_code == 403, foreign.text
        assert foreign.json()["error"]["code"] == -32600, foreign.text
        called = server.http.post(server.url + "/admin/mcp", json=LIST, headers=MCP)
        assert called.status_code == 401, called.text
        assert "www-authenticate" in called.headers, called.headers
