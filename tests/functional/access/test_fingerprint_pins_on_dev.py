"""A pinned client is never served a definition other than the one it pinned, on `kiln dev`
run as an unprivileged user (one uid for the server and its runs, as on Lambda).

Three pins are walked through every change a tool can go through (a new revision, a
rename, a restore of an old revision, a delete, a new tool under the same name with other
code): a view pinned to a revision (`pt@1`), a view pinned to a fingerprint
(`pt@sha256:…`), and a client sending the fingerprint it approved in a `tools/call`'s
`_meta`. Each either runs exactly the pinned code or is refused; the refusal of a call
names the fingerprint the tool has now.
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

KEY = "dev.kiln/fingerprint"


def tool(name: str, text: str) -> dict[str, Any]:
    code = f"print({text!r})\n"
    return {"name": name, "description": "Prints what it is.", "language": "python", "code": code}


@pytest.fixture(scope="module")
def dev() -> Iterator[DevServer]:
    base = Path(tempfile.mkdtemp(prefix="kiln-fingerprint-pins-"))
    try:
        with kiln_dev_as("unprivileged", base, "--no-examples") as server:
            yield server
    finally:
        shutil.rmtree(base, ignore_errors=True)


def ok(response: httpx.Response, status: int = 200) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body: dict[str, Any] = response.json()
    return body


def listed(dev: DevServer, path: str = "/mcp") -> dict[str, str]:
    """Each listed tool's fingerprint, by name."""
    tools = ok(dev.mcp("tools/list", path=path))["result"]["tools"]
    return {t["name"]: t["_meta"][KEY] for t in tools}


def call(dev: DevServer, name: str, pinned: str | None = None, path: str = "/mcp") -> str:
    """What a call printed, or `error CODE: message` (with the fingerprint its data names)."""
    params: dict[str, Any] = {"name": name, "arguments": {}}
    if pinned is not None:
        params["_meta"] = {KEY: pinned}
    body = ok(dev.mcp("tools/call", params, path=path))
    if "error" in body:
        named = (body["error"].get("data") or {}).get("fingerprint")
        return f"error {body['error']['code']}: {body['error']['message']} [{named}]"
    assert body["result"]["isError"] is False, body
    return str(body["result"]["content"][0]["text"]).strip()


def view(dev: DevServer, name: str, tools: list[str]) -> httpx.Response:
    body = {"name": name, "tools": tools, "published": True, "anonymous": True}
    return dev.api("POST", "/api/views", json=body)


def refused(answer: str, now: str | None) -> bool:
    return (
        answer.startswith("error -32602: Tool ")
        and "was not run" in answer
        and (now is None or answer.endswith(f"[{now}]"))
    )


def test_every_pin_is_kept_across_saves_renames_restores_deletes_and_a_new_namesake(
    dev: DevServer,
) -> None:
    ok(dev.api("POST", "/api/tools", json=tool("pt", "one")), 201)
    f1 = listed(dev)["pt"]
    assert ok(dev.api("GET", "/api/tools/pt"))["fingerprint"] == f1  # REST shows the same
    ok(view(dev, "by-rev", ["pt@1"]), 201)
    ok(view(dev, "by-fp", [f"pt@{f1}"]), 201)
    assert call(dev, "pt", f1) == "one"

    # A new revision: the pinned call is refused, naming the new fingerprint; views keep r1.
    ok(dev.api("PUT", "/api/tools/pt", json=tool("pt", "two"), headers={"If-Match": '"1"'}))
    f2 = listed(dev)["pt"]
    assert f2 != f1
    assert refused(call(dev, "pt", f1), f2)
    assert call(dev, "pt", f2) == "two"
    assert call(dev, "pt", path="/mcp/v/by-rev") == "one"
    assert call(dev, "pt", path="/mcp/v/by-fp") == "one"
    assert listed(dev, "/mcp/v/by-fp") == {"pt": f1}

    # A rename: the name is part of what a client approved.
    ok(dev.api("POST", "/api/tools/pt/rename", json={"name": "pt2"}))
    f2_renamed = listed(dev)["pt2"]
    assert f2_renamed not in (f1, f2)
    assert call(dev, "pt", f2).startswith("error -32602: Unknown tool")
    assert refused(call(dev, "pt2", f2), f2_renamed)
    assert call(dev, "pt2", path="/mcp/v/by-rev") == "one"  # a revision pin follows the tool
    assert listed(dev, "/mcp/v/by-fp") == {}  # a fingerprint pin does not: nothing is served
    assert not call(dev, "pt2", path="/mcp/v/by-fp").startswith("one")
    problems = ok(dev.api("GET", "/api/views/by-fp"))["problems"]
    assert problems == [
        f"pt2@{f1}: 'pt2' (revision 1) is no longer {f1}: it was renamed or is not that "
        "definition; nothing is served in its place"
    ]

    # Restoring r1 under the new name: its content, but not what was approved as `pt`.
    ok(dev.api("POST", "/api/tools/pt2/revisions/1/restore", headers={"If-Match": '"2"'}))
    f3 = listed(dev)["pt2"]
    assert f3 not in (f1, f2, f2_renamed)
    assert refused(call(dev, "pt2", f2_renamed), f3)
    assert refused(call(dev, "pt2", f1), f3)
    assert call(dev, "pt2", path="/mcp/v/by-rev") == "one"

    # Renamed back, r3 is exactly what was approved as `pt`: the same fingerprint, served.
    ok(dev.api("POST", "/api/tools/pt2/rename", json={"name": "pt"}))
    assert listed(dev)["pt"] == f1
    assert call(dev, "pt", f1) == "one"
    assert call(dev, "pt", path="/mcp/v/by-fp") == "one"

    # Deleted: nothing is served, to anyone pinned.
    ok(dev.api("DELETE", "/api/tools/pt"))
    assert call(dev, "pt", f1).startswith("error -32602: Unknown tool")
    assert listed(dev, "/mcp/v/by-rev") == {}
    assert listed(dev, "/mcp/v/by-fp") == {}

    # A new tool under the same name with other code: refused to the pinned client, never
    # served by either view (they are bound to the tool that was deleted).
    ok(dev.api("POST", "/api/tools", json=tool("pt", "IMPOSTOR")), 201)
    f_new = listed(dev)["pt"]
    assert f_new != f1
    assert refused(call(dev, "pt", f1), f_new)
    for pinned_view in ("by-rev", "by-fp"):
        assert listed(dev, f"/mcp/v/{pinned_view}") == {}
        assert "IMPOSTOR" not in call(dev, "pt", path=f"/mcp/v/{pinned_view}")
    assert call(dev, "pt", f_new) == "IMPOSTOR"


def test_a_view_pin_by_fingerprint_must_name_a_revision_that_has_it(dev: DevServer) -> None:
    ok(dev.api("POST", "/api/tools", json=tool("vp", "x")), 201)
    head = listed(dev)["vp"]
    other = "sha256:" + "0" * 64
    answer = view(dev, "bad-fp", [f"vp@{other}"])
    assert answer.status_code == 422, answer.text
    assert "no revision of 'vp' has that fingerprint" in answer.text, answer.text
    assert head in answer.text, answer.text  # it says what the head has
    answer = view(dev, "bad-fp", ["vp@sha256:ABC"])
    assert answer.status_code == 422, answer.text
    assert "64 lower-case hex digits" in answer.text, answer.text
    answer = view(dev, "bad-fp", [f"ghost@{other}"])
    assert answer.status_code == 422, answer.text
    assert "no tool is named 'ghost'" in answer.text, answer.text


def test_the_modern_wire_carries_the_pin_beside_its_required_meta(dev: DevServer) -> None:
    ok(dev.api("POST", "/api/tools", json=tool("vm", "modern")), 201)
    now = listed(dev)["vm"]
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "pins-test"},
    }
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
               "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call",
               "Mcp-Name": "vm"}  # fmt: skip

    def call_modern(pinned: str) -> dict[str, Any]:
        params = {"name": "vm", "arguments": {}, "_meta": {**meta, KEY: pinned}}
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
        answer = dev.http.post(dev.url + "/mcp", json=body, headers=headers)
        assert answer.status_code in (200, 400), answer.text
        reply: dict[str, Any] = answer.json()
        return reply

    assert call_modern(now)["result"]["content"][0]["text"].strip() == "modern"
    stale = call_modern("sha256:" + "1" * 64)["error"]
    assert stale["code"] == -32602, stale
    assert stale["data"]["fingerprint"] == now, stale


def test_a_fingerprint_that_is_not_one_is_refused_and_nothing_runs(dev: DevServer) -> None:
    ok(dev.api("POST", "/api/tools", json=tool("vq", "ran")), 201)
    body = ok(dev.mcp("tools/call", {"name": "vq", "arguments": {}, "_meta": {KEY: "sha256:x"}}))
    assert body["error"]["code"] == -32602, body
    assert "must be a tool's fingerprint" in body["error"]["message"], body
