"""The fingerprint served for a tool with packages names the exact versions its bundle resolved
to, and listing reads no bundle record for it: real builds from a local wheel folder (no PyPI),
through the real app over HTTP (tools/list and pinned tools/call, JSON-RPC). The bundle turning
ready, or leaving ready to be rebuilt, steps the catalog version; the snapshot carries what it
resolved to (catalog/packages.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from functional.bundles.test_bundle_app import Gate, start, wait_status
from kiln.bundles.store import zip_key
from kiln.catalog import fingerprint
from kiln.settings import Settings
from support.app import RunningKiln
from support.bundle_records import snapshot_bundle_reads
from support.wheels import NAME, tiny_wheel, wheel_folder

pytestmark = pytest.mark.slow

KEY = "dev.kiln/fingerprint"
HEADERS = {"MCP-Protocol-Version": "2025-06-18"}
TINY = {
    "name": "tiny_version",
    "description": "Say the fixture's version.",
    "language": "python",
    "requirements": [f"{NAME}>=1"],
    "input_schema": {"type": "object"},
    "code": "import json\nimport kiln_fixture_tiny as t\nprint(json.dumps({'v': t.VERSION}))\n",
}
PLAIN = {
    "name": "plain",
    "description": "Say hello.",
    "language": "python",
    "input_schema": {"type": "object"},
    "code": "import json\nprint(json.dumps({'hello': 'world'}))\n",
}


def listed(server: RunningKiln) -> dict[str, str]:
    """Each listed tool's `_meta` fingerprint, by name."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    response = server.mcp(body, headers=HEADERS)
    assert response.status_code == 200, response.text
    return {t["name"]: t["_meta"][KEY] for t in response.json()["result"]["tools"]}


def pinned_call(server: RunningKiln, name: str, pin: str) -> dict[str, Any]:
    params = {"name": name, "arguments": {}, "_meta": {KEY: pin}}
    body = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": params}
    response = server.mcp(body, headers=HEADERS)
    assert response.status_code == 200, response.text
    return dict(response.json())


def test_the_served_fingerprint_follows_what_the_bundle_resolved_to_and_pins_hold_to_it(
    make_server: Callable[..., RunningKiln],
    kiln_settings: Settings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    wheels = wheel_folder(tmp_path, monkeypatch)
    tiny_wheel(wheels, "1.0")
    gate = Gate()
    server, worker = start(make_server, kiln_settings, gate)
    try:
        plain = server.api("POST", "/api/tools", json=PLAIN)
        assert plain.status_code == 201, plain.text
        created = server.api("POST", "/api/tools", json=TINY)
        assert created.status_code == 201, created.text
        bundle_id = created.json()["bundle_id"]
        assert gate.building.wait(60)

        # While it builds: no fingerprint can name its versions, and a pin is refused unrun.
        building = listed(server)
        assert building["tiny_version"] == "pending", building
        shown = server.api("GET", "/api/tools/tiny_version").json()
        assert shown["fingerprint"] == "pending", shown  # REST says what MCP says
        plain_fp = building["plain"]
        assert plain_fp == fingerprint.of("plain", server.kiln.store.get("plain").head), building
        saved = server.kiln.store.get("tiny_version").head
        for pin in (saved.fingerprint, plain_fp):  # the save's (bundle-id) form runs nothing
            refused = pinned_call(server, "tiny_version", pin)
            assert refused["error"]["code"] == -32602, refused
            assert "packages are still being built" in refused["error"]["message"], refused

        gate.opened.set()
        first = wait_status(server, bundle_id, "ready")
        with snapshot_bundle_reads(server.kiln.clients.dynamodb) as reads:
            f1 = listed(server)["tiny_version"]
            moved = list(reads)  # the snapshot moving to the version the build stepped
            assert listed(server)["tiny_version"] == f1
            assert listed(server)["tiny_version"] == f1
        assert moved in ([], [f"BUNDLE#{bundle_id}"]), moved
        assert reads == moved, reads  # listing again reads no bundle record at all
        assert f1 == fingerprint.of("tiny_version", saved, first["resolved_sha256"])
        assert f1 != saved.fingerprint  # not the bundle-id form stored at save
        ran = pinned_call(server, "tiny_version", f1)
        assert "error" not in ran, ran
        assert ran["result"].get("isError") is not True, ran
        assert '"1.0"' in ran["result"]["content"][0]["text"], ran

        # A rebuild (its zip lost) resolves >=1 to 1.1: "pending" while it builds, then
        # another fingerprint; F1 is refused unrun, and the requirements text never changed.
        tiny_wheel(wheels, "1.1")
        gate.opened.clear()
        gate.building.clear()
        store = server.kiln.bundles.store
        store.s3.delete_object(Bucket=store.bucket, Key=zip_key(bundle_id))
        retried = server.api("POST", f"/api/bundles/{bundle_id}/retry")
        assert retried.status_code == 202, retried.text
        assert gate.building.wait(60)
        assert listed(server)["tiny_version"] == "pending"
        during = pinned_call(server, "tiny_version", f1)
        assert "packages are still being built" in during["error"]["message"], during
        gate.opened.set()
        second = wait_status(server, bundle_id, "ready")
        assert second["resolved_sha256"] != first["resolved_sha256"], second
        after = listed(server)
        f2 = after["tiny_version"]
        assert f2 == fingerprint.of("tiny_version", saved, second["resolved_sha256"])
        assert f2 != f1
        assert server.kiln.store.get("tiny_version").head == saved  # no new revision
        assert after["plain"] == plain_fp  # a tool without packages keeps its fingerprint
        shown = server.api("GET", "/api/tools/tiny_version").json()  # what `kiln tools show` prints
        assert shown["fingerprint"] == f2, shown
        rows = server.api("GET", "/api/tools").json()["tools"]  # `kiln tools ls`, the studio
        assert {t["name"]: t["fingerprint"] for t in rows} == after, rows
        stale = pinned_call(server, "tiny_version", f1)
        assert stale["error"]["code"] == -32602, stale
        assert stale["error"]["data"]["fingerprint"] == f2, stale
        assert "no longer the definition you approved" in stale["error"]["message"], stale
        ran = pinned_call(server, "tiny_version", f2)
        assert '"1.1"' in ran["result"]["content"][0]["text"], ran
        calls = server.api("GET", "/api/calls", params={"tool": "tiny_version"}).json()["calls"]
        assert [c["outcome"] for c in calls].count("ok") == 2, calls  # the F1 and F2 runs
    finally:
        gate.opened.set()
        worker.stop()
