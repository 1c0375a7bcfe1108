"""A pinned view cannot be made to serve another tool: attacks on `kiln dev`, run as root
and as an unprivileged user (one uid for the server and its runs, as on Lambda).

A view's entries are bound to the tool (its id, and a pinned revision's content digest):
rename the tool away and put an impostor under its name, and the view still serves the
original (under its new name) or, once that is gone, nothing -- saying so in `GET
/api/views` and `kiln views ls`. A rename carries the views that name the tool along.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from support.devserver import DevServer, kiln_dev_as


def tool(name: str, text: str) -> dict[str, Any]:
    code = f"print({text!r})\n"
    return {"name": name, "description": f"Prints {text}.", "language": "python", "code": code}


@pytest.fixture(scope="module", params=["root", "unprivileged"])
def dev(request: pytest.FixtureRequest) -> Iterator[DevServer]:
    base = Path(tempfile.mkdtemp(prefix="kiln-view-pins-"))
    try:
        with kiln_dev_as(request.param, base, "--no-examples") as server:
            yield server
    finally:
        shutil.rmtree(base, ignore_errors=True)


def ok(response: httpx.Response, status: int = 200) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body: dict[str, Any] = response.json()
    return body


def through(dev: DevServer, view: str, method: str, params: dict[str, Any] | None = None) -> Any:
    """An MCP request on the view's own (published, anonymous) path."""
    return ok(dev.mcp(method, params, path=f"/mcp/v/{view}"))


def listed(dev: DevServer, view: str) -> set[str]:
    return {t["name"] for t in through(dev, view, "tools/list")["result"]["tools"]}


def called(dev: DevServer, view: str, name: str) -> str:
    body = through(dev, view, "tools/call", {"name": name, "arguments": {}})
    if "error" in body:
        return f"error {body['error']['code']}: {body['error']['message']}"
    return str(body["result"]["content"][0]["text"]).strip()


def view(dev: DevServer, name: str, tools: list[str]) -> None:
    body = {"name": name, "tools": tools, "published": True, "anonymous": True}
    ok(dev.api("POST", "/api/views", json=body), 201)


def test_a_pinned_view_never_serves_an_impostor_that_took_its_tools_name(dev: DevServer) -> None:
    ok(dev.api("POST", "/api/tools", json=tool("vt", "original vt")), 201)
    view(dev, "pinned", ["vt@1"])
    assert called(dev, "pinned", "vt") == "original vt"

    renamed = ok(dev.api("POST", "/api/tools/vt/rename", json={"name": "vt-away"}))
    ok(dev.api("POST", "/api/tools", json=tool("vt", "IMPOSTOR vt")), 201)

    assert "IMPOSTOR" not in called(dev, "pinned", "vt")
    assert listed(dev, "pinned") == {"vt-away"}
    assert called(dev, "pinned", "vt-away") == "original vt"
    assert renamed["views"] == ["pinned"]  # the rename says which views it carried
    assert ok(dev.api("GET", "/api/views/pinned"))["tools"] == ["vt-away@1"]

    ok(dev.api("DELETE", "/api/tools/vt-away"))
    assert listed(dev, "pinned") == set()  # refused: not the impostor in its place
    assert "IMPOSTOR" not in called(dev, "pinned", "vt")
    shown = {v["name"]: v for v in ok(dev.api("GET", "/api/views"))["views"]}
    assert shown["pinned"]["problems"] == [
        "vt-away@1: the tool it names is gone (deleted); nothing is served in its place"
    ]
    printed = dev.kiln("views", "ls")
    assert printed.returncode == 0, printed.stderr
    assert "! vt-away@1: the tool it names is gone (deleted)" in printed.stdout, printed.stdout


def test_renaming_a_tool_carries_the_views_that_name_it_along(dev: DevServer) -> None:
    ok(dev.api("POST", "/api/tools", json=tool("other", "other")), 201)
    view(dev, "by-name", ["other"])
    renamed = ok(dev.api("POST", "/api/tools/other/rename", json={"name": "other-renamed"}))
    assert listed(dev, "by-name") == {"other-renamed"}  # not emptied
    assert called(dev, "by-name", "other-renamed") == "other"
    assert renamed["views"] == ["by-name"]
    assert ok(dev.api("GET", "/api/views/by-name"))["tools"] == ["other-renamed"]
    assert ok(dev.api("GET", "/api/views/by-name"))["problems"] == []
