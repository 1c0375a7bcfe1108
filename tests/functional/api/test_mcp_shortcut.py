"""A plain POST /mcp skips the middleware that has nothing to do for it (kiln.api.mcp's
McpShortcut): it must answer exactly as the whole stack does."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from conftest import AwsStack
from kiln.catalog.rules import check_draft
from kiln.settings import Settings
from support.app import RunningKiln, serve

SKIPPED_BY_HTTPX = {"date", "server", "content-length", "content-encoding"}
ORIGIN = "https://app.example"  # an allowed Origin: CORS acts, so the whole stack answers


@pytest.fixture(params=["kiln dev's app", "the public function's app"])
def server(
    request: pytest.FixtureRequest, kiln_settings: Settings, aws: AwsStack
) -> Iterator[RunningKiln]:
    settings = kiln_settings.with_(allowed_origins=(ORIGIN,))
    yield from serve(settings, aws, public_only=request.param != "kiln dev's app")


def post(server: RunningKiln, body: Any, **headers: str) -> httpx.Response:
    base = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    return server.http.post(server.url + "/mcp", json=body, headers={**base, **headers})


def answer(response: httpx.Response) -> tuple[int, dict[str, str], Any]:
    headers = {k: v for k, v in response.headers.items()
               if k not in SKIPPED_BY_HTTPX and not k.startswith("access-control-")}  # fmt: skip
    return response.status_code, headers, response.json()


@pytest.mark.parametrize("coding", ["identity", "gzip"])
@pytest.mark.parametrize("tools", [3, 30])  # a page under and over gzip's minimum size
def test_a_plain_post_answers_as_through_every_middleware(
    server: RunningKiln, tools: int, coding: str
) -> None:
    for index in range(tools):
        draft = {"name": f"tool_{index:02d}", "language": "python", "code": "print(1)\n",
                 "description": f"Tool number {index}, listed to fill a page."}  # fmt: skip
        server.kiln.store.create(check_draft(draft), actor="test")
    body = {"jsonrpc": "2.0", "id": 7, "method": "tools/list", "params": {}}
    plain = post(server, body, **{"Accept-Encoding": coding})
    whole = post(server, body, **{"Accept-Encoding": coding, "Origin": ORIGIN})  # every one
    assert whole.headers.get("access-control-allow-origin") == ORIGIN, whole.headers
    compressed = "gzip" if coding == "gzip" and tools == 30 else None
    assert plain.headers.get("content-encoding") == compressed, plain.headers
    assert whole.headers.get("content-encoding") == compressed, whole.headers
    assert answer(plain) == answer(whole)
    assert len(plain.json()["result"]["tools"]) == tools


def test_a_refusal_on_the_plain_path_is_the_usual_json_rpc_error(server: RunningKiln) -> None:
    refused = post(
        server, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, Authorization="Bearer nope"
    )
    assert refused.status_code == 401, refused.text
    assert "error" in refused.json(), refused.text
    assert "www-authenticate" in refused.headers, refused.headers
    broken = server.http.post(
        server.url + "/mcp", content=b"{", headers={"Content-Type": "application/json"}
    )
    assert broken.json()["error"]["code"] == -32700, broken.text
