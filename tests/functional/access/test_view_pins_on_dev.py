"""A pinned view cannot be made to serve another tool: attacks on `kiln dev`, run as root
and as an unprivileged user (one uid for the server and its runs, as on Lambda).

A view's entries are bound to the tool (its id, and a pinned revision's content digest):
rename the tool away and put an impostor under its name, and the view still serves the
original (under its new name) or, once that is gone, nothing -- saying so in `GET
/api/views` and `kiln views ls`. A rename carries the views that name the tool along. The
same holds for pins by fingerprint, and for a client that sends the fingerprint it approved
with its call (below).
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from kiln.aws.clients import make_clients
from support.devserver import DevServer, kiln_dev_as
from support.wheels import NAME as WHEEL
from support.wheels import tiny_wheel


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


# -- pins by fingerprint (kiln.catalog.fingerprint): three pins walked through every change a
# tool can go through (a new revision, a rename, a restore of an old revision, a delete, a new
# tool under the same name with other code): a view pinned to a revision (`pt@1`), a view
# pinned to a fingerprint (`pt@sha256:…`), and a client sending the fingerprint it approved in
# a `tools/call`'s `_meta`. Each runs exactly the pinned code or is refused; the refusal of a
# call names the fingerprint the tool has now.

KEY = "dev.kiln/fingerprint"


def prints(dev: DevServer, path: str = "/mcp") -> dict[str, str]:
    """Each listed tool's fingerprint, by name."""
    tools = ok(dev.mcp("tools/list", path=path))["result"]["tools"]
    return {t["name"]: t["_meta"][KEY] for t in tools}


def pinned_call(dev: DevServer, name: str, pinned: str | None = None, path: str = "/mcp") -> str:
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


def put_view(dev: DevServer, name: str, tools: list[str]) -> httpx.Response:
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
    f1 = prints(dev)["pt"]
    assert ok(dev.api("GET", "/api/tools/pt"))["fingerprint"] == f1  # REST shows the same
    ok(put_view(dev, "by-rev", ["pt@1"]), 201)
    ok(put_view(dev, "by-fp", [f"pt@{f1}"]), 201)
    assert pinned_call(dev, "pt", f1) == "one"

    # A new revision: the pinned call is refused, naming the new fingerprint; views keep r1.
    ok(dev.api("PUT", "/api/tools/pt", json=tool("pt", "two"), headers={"If-Match": '"1"'}))
    f2 = prints(dev)["pt"]
    assert f2 != f1
    assert refused(pinned_call(dev, "pt", f1), f2)
    assert pinned_call(dev, "pt", f2) == "two"
    assert pinned_call(dev, "pt", path="/mcp/v/by-rev") == "one"
    assert pinned_call(dev, "pt", path="/mcp/v/by-fp") == "one"
    assert prints(dev, "/mcp/v/by-fp") == {"pt": f1}

    # A rename: the name is part of what a client approved.
    ok(dev.api("POST", "/api/tools/pt/rename", json={"name": "pt2"}))
    f2_renamed = prints(dev)["pt2"]
    assert f2_renamed not in (f1, f2)
    assert pinned_call(dev, "pt", f2).startswith("error -32602: Unknown tool")
    assert refused(pinned_call(dev, "pt2", f2), f2_renamed)
    assert pinned_call(dev, "pt2", path="/mcp/v/by-rev") == "one"  # a revision pin follows the tool
    assert prints(dev, "/mcp/v/by-fp") == {}  # a fingerprint pin does not: nothing is served
    assert not pinned_call(dev, "pt2", path="/mcp/v/by-fp").startswith("one")
    problems = ok(dev.api("GET", "/api/views/by-fp"))["problems"]
    assert problems == [
        f"pt2@{f1}: 'pt2' (revision 1) is no longer {f1}: it was renamed or is not that "
        "definition; nothing is served in its place"
    ]

    # Restoring r1 under the new name: its content, but not what was approved as `pt`.
    ok(dev.api("POST", "/api/tools/pt2/revisions/1/restore", headers={"If-Match": '"2"'}))
    f3 = prints(dev)["pt2"]
    assert f3 not in (f1, f2, f2_renamed)
    assert refused(pinned_call(dev, "pt2", f2_renamed), f3)
    assert refused(pinned_call(dev, "pt2", f1), f3)
    assert pinned_call(dev, "pt2", path="/mcp/v/by-rev") == "one"

    # Renamed back, r3 is exactly what was approved as `pt`: the same fingerprint, served.
    ok(dev.api("POST", "/api/tools/pt2/rename", json={"name": "pt"}))
    assert prints(dev)["pt"] == f1
    assert pinned_call(dev, "pt", f1) == "one"
    assert pinned_call(dev, "pt", path="/mcp/v/by-fp") == "one"

    # Deleted: nothing is served, to anyone pinned.
    ok(dev.api("DELETE", "/api/tools/pt"))
    assert pinned_call(dev, "pt", f1).startswith("error -32602: Unknown tool")
    assert prints(dev, "/mcp/v/by-rev") == {}
    assert prints(dev, "/mcp/v/by-fp") == {}

    # A new tool under the same name with other code: refused to the pinned client, never
    # served by either view (they are bound to the tool that was deleted).
    ok(dev.api("POST", "/api/tools", json=tool("pt", "IMPOSTOR")), 201)
    f_new = prints(dev)["pt"]
    assert f_new != f1
    assert refused(pinned_call(dev, "pt", f1), f_new)
    for pinned_view in ("by-rev", "by-fp"):
        assert prints(dev, f"/mcp/v/{pinned_view}") == {}
        assert "IMPOSTOR" not in pinned_call(dev, "pt", path=f"/mcp/v/{pinned_view}")
    assert pinned_call(dev, "pt", f_new) == "IMPOSTOR"


def test_a_view_pin_by_fingerprint_must_name_a_revision_that_has_it(dev: DevServer) -> None:
    ok(dev.api("POST", "/api/tools", json=tool("vp", "x")), 201)
    head = prints(dev)["vp"]
    other = "sha256:" + "0" * 64
    answer = put_view(dev, "bad-fp", [f"vp@{other}"])
    assert answer.status_code == 422, answer.text
    assert "no revision of 'vp' has that fingerprint" in answer.text, answer.text
    assert head in answer.text, answer.text  # it says what the head has
    answer = put_view(dev, "bad-fp", ["vp@sha256:ABC"])
    assert answer.status_code == 422, answer.text
    assert "64 lower-case hex digits" in answer.text, answer.text
    answer = put_view(dev, "bad-fp", [f"ghost@{other}"])
    assert answer.status_code == 422, answer.text
    assert "no tool is named 'ghost'" in answer.text, answer.text


def test_the_modern_wire_carries_the_pin_beside_its_required_meta(dev: DevServer) -> None:
    ok(dev.api("POST", "/api/tools", json=tool("vm", "modern")), 201)
    now = prints(dev)["vm"]
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


# -- a rebuild that resolves the same requirements to other versions (its zip lost): the
# served fingerprint names the exact versions, so a client or a view pinned to it is refused
# or served nothing; a revision pin (a revision, not versions) keeps serving the revision.


@pytest.fixture(scope="module", params=["root", "unprivileged"])
def dev_wheels(request: pytest.FixtureRequest) -> Iterator[tuple[DevServer, Path]]:
    """`kiln dev` building from a local wheel folder (no index), and that folder."""
    base = Path(tempfile.mkdtemp(prefix="kiln-view-pins-wheels-"))
    wheels = base / "wheels"
    wheels.mkdir(parents=True)
    wheels.chmod(0o755)
    env = {"UV_NO_INDEX": "1", "UV_FIND_LINKS": str(wheels), "PIP_NO_INDEX": "1",
           "PIP_FIND_LINKS": str(wheels)}  # fmt: skip
    try:
        with kiln_dev_as(request.param, base, "--no-examples", env=env) as server:
            yield server, wheels
    finally:
        shutil.rmtree(base, ignore_errors=True)


def built(dev: DevServer, bundle_id: str) -> dict[str, Any]:
    """The bundle's record once it is ready (polled with a deadline)."""
    deadline = time.monotonic() + 180
    while True:
        record = ok(dev.api("GET", f"/api/bundles/{bundle_id}"))
        if record["status"] == "ready":
            return record
        assert record["status"] in ("pending", "building"), record
        assert time.monotonic() < deadline, record
        time.sleep(0.2)


def test_every_pin_is_kept_across_a_rebuild_that_resolves_other_versions(
    dev_wheels: tuple[DevServer, Path],
) -> None:
    dev, wheels = dev_wheels
    tiny_wheel(wheels, "1.0")
    code = "import kiln_fixture_tiny as t\nprint(t.VERSION)\n"
    body = {"name": "pk", "description": "Prints its package's version.", "language": "python",
            "code": code, "requirements": [f"{WHEEL}>=1"]}  # fmt: skip
    bundle_id = ok(dev.api("POST", "/api/tools", json=body), 201)["bundle_id"]
    first = built(dev, bundle_id)
    f1 = prints(dev)["pk"]
    saved = ok(dev.api("GET", "/api/tools/pk/revisions"))["revisions"][-1]["fingerprint"]
    assert f1 != saved  # served over what the bundle resolved to, not the bundle id
    assert ok(dev.api("GET", "/api/tools/pk"))["fingerprint"] == f1  # REST shows the same
    ok(put_view(dev, "wk-rev", ["pk@1"]), 201)
    ok(put_view(dev, "wk-fp", [f"pk@{f1}"]), 201)  # the served form pins the versions too
    assert pinned_call(dev, "pk", f1) == "1.0"
    assert pinned_call(dev, "pk", path="/mcp/v/wk-fp") == "1.0"

    # The zip is lost and the bundle rebuilt: >=1 now resolves to 1.1; no revision is made.
    tiny_wheel(wheels, "1.1")
    keys = dev.env
    s3 = make_clients(
        endpoint_url=keys["AWS_ENDPOINT_URL"],
        region=keys["AWS_REGION"],
        credentials=(keys["AWS_ACCESS_KEY_ID"], keys["AWS_SECRET_ACCESS_KEY"]),
    ).s3
    s3.delete_object(Bucket="kiln-local", Key=f"bundles/{bundle_id}.zip")  # kiln dev's bucket
    ok(dev.api("POST", f"/api/bundles/{bundle_id}/retry"), 202)
    second = built(dev, bundle_id)
    assert second["resolved_sha256"] != first["resolved_sha256"], second
    f2 = prints(dev)["pk"]
    assert f2 != f1
    assert refused(pinned_call(dev, "pk", f1), f2)  # never 1.1 under the 1.0 fingerprint
    assert pinned_call(dev, "pk", f2) == "1.1"
    assert pinned_call(dev, "pk", path="/mcp/v/wk-rev") == "1.1"  # a revision, not versions
    assert prints(dev, "/mcp/v/wk-fp") == {}  # pinned to 1.0's fingerprint: nothing served
    assert pinned_call(dev, "pk", path="/mcp/v/wk-fp").startswith("error -32602")
    assert ok(dev.api("GET", "/api/tools/pk/revisions"))["revisions"][-1]["revision"] == 1
