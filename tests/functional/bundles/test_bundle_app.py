"""Bundles through the real app: save returns at once, builds run in the background, calls
use the bundle or say why they cannot, REST shows and retries bundles."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import AwsStack
from kiln.bundles.scheduler import LocalBuildWorker
from kiln.settings import Settings
from support.app import RunningKiln

pytestmark = pytest.mark.slow

HUMANIZE = {
    "description": "Format a byte count for people.",
    "language": "python",
    "requirements": ["humanize==4.*"],
    "input_schema": {
        "type": "object",
        "properties": {"bytes": {"type": "integer", "minimum": 0}},
        "additionalProperties": False,
    },
    "code": (
        "import json, sys\nimport humanize\nargs = json.load(sys.stdin)\n"
        "print(json.dumps({'text': humanize.naturalsize(args.get('bytes', 0))}))\n"
    ),
}


class Gate:
    """Holds every build just after it took the bundle (status `building`) until opened."""

    def __init__(self) -> None:
        self.opened = threading.Event()
        self.building = threading.Event()

    def __call__(self, bundle_id: str, message: str) -> None:
        self.building.set()
        assert self.opened.wait(120), "the test never opened the gate"


def start(
    make_server: Callable[..., RunningKiln], settings: Settings, gate: Gate | None = None
) -> tuple[RunningKiln, LocalBuildWorker]:
    server = make_server(settings)
    bundles = server.kiln.bundles
    assert bundles is not None
    worker = LocalBuildWorker(bundles.store, progress=gate).start()
    bundles.scheduler = worker  # count this worker's builds; the app's own one stays idle
    return server, worker


def mcp_call(server: RunningKiln, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    response = server.mcp(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": name, "arguments": arguments},
        },
        headers={"MCP-Protocol-Version": "2025-06-18"},
    )
    assert response.status_code == 200, response.text
    return dict(response.json()["result"])


def wait_status(
    server: RunningKiln, bundle_id: str, status: str, timeout: float = 120
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        body = server.api("GET", f"/api/bundles/{bundle_id}").json()
        if body["status"] == status or time.monotonic() > deadline:
            assert body["status"] == status, body
            return dict(body)
        time.sleep(0.1)


def test_saving_returns_at_once_the_bundle_builds_in_the_background_and_is_shared(
    make_server: Callable[..., RunningKiln], kiln_settings: Settings, aws: AwsStack
) -> None:
    gate = Gate()
    server, worker = start(make_server, kiln_settings, gate)
    try:
        # The gate holds the build: a save that waited for it would never answer.
        created = server.api("POST", "/api/tools", json={**HUMANIZE, "name": "humanize_bytes"})
        assert created.status_code == 201, created.text
        bundle_id = created.json()["bundle_id"]
        assert gate.building.wait(30)

        # A call while the bundle builds: a tool error that says so and since when.
        during = mcp_call(server, "humanize_bytes", {"bytes": 3_000_000})
        assert during["isError"] is True
        text = during["content"][0]["text"]
        assert "humanize==4.*" in text
        assert "are being built, since" in text
        shown = server.api("GET", "/api/tools/humanize_bytes").json()
        assert shown["bundle"]["status"] == "building"

        gate.opened.set()
        ready = wait_status(server, bundle_id, "ready")
        assert any(p["name"].lower() == "humanize" for p in ready["lock"])

        after = mcp_call(server, "humanize_bytes", {"bytes": 3_000_000})
        assert after.get("isError") is not True, after
        assert '"3.0 MB"' in after["content"][0]["text"]

        second = server.api("POST", "/api/tools", json={**HUMANIZE, "name": "humanize_again"})
        assert second.json()["bundle_id"] == bundle_id
        again = mcp_call(server, "humanize_again", {"bytes": 1024})
        assert '"1.0 kB"' in again["content"][0]["text"]
        assert worker.wait_idle(10)
        assert worker.builds_started == 1
        listed = server.api("GET", "/api/bundles").json()["bundles"]
        assert [(b["id"], b["build_count"]) for b in listed] == [(bundle_id, 1)]
    finally:
        gate.opened.set()
        worker.stop()


def test_calls_while_the_packages_build_are_ledgered_not_ready_and_are_not_errors(
    make_server: Callable[..., RunningKiln], kiln_settings: Settings
) -> None:
    gate = Gate()
    server, worker = start(make_server, kiln_settings, gate)
    try:
        created = server.api("POST", "/api/tools", json={**HUMANIZE, "name": "polled"})
        assert created.status_code == 201, created.text
        assert gate.building.wait(30)
        for _ in range(6):  # polled while it builds, as a client retrying would
            during = mcp_call(server, "polled", {"bytes": 1})
            assert "are being built, since" in during["content"][0]["text"], during

        calls = server.api("GET", "/api/calls", params={"tool": "polled"}).json()["calls"]
        assert [c["outcome"] for c in calls] == ["not_ready"] * 6, calls
        by_tool = server.api("GET", "/api/calls/by-tool").json()["tools"]
        assert by_tool["polled"] == {"calls": 6, "errors": 0, "not_ready": 6, "error_rate": 0.0}
        chart = server.api("GET", "/api/calls/chart", params={"tool": "polled"}).json()
        assert chart["totals"]["errors"] == 0, chart
        assert chart["outcomes"]["not_ready"] == 6, chart
        day = server.api("GET", "/api/calls/totals").json()
        assert day["by_tool"]["polled"]["not_ready"] == 6, day
        assert day["by_tool"]["polled"]["tool_error"] == 0, day
    finally:
        gate.opened.set()
        worker.stop()


def test_a_requirement_that_does_not_exist_fails_keeps_its_log_and_tells_only_its_author_why(
    make_server: Callable[..., RunningKiln], kiln_settings: Settings
) -> None:
    server, worker = start(make_server, kiln_settings)
    try:
        created = server.api(
            "POST",
            "/api/tools",
            json={**HUMANIZE, "name": "broken", "requirements": ["kiln-no-such-package-9f1c==1.0"]},
        )
        bundle_id = created.json()["bundle_id"]
        failed = wait_status(server, bundle_id, "failed")
        assert "kiln-no-such-package-9f1c" in failed["error"]
        with_log = server.api("GET", f"/api/bundles/{bundle_id}", params={"log": "true"}).json()
        assert "was not found in the package registry" in with_log["log"]

        # Any caller (anonymous here): one line, nothing of the build, no author's command.
        result = mcp_call(server, "broken", {})
        assert result["isError"] is True
        assert result["content"] == [{"type": "text", "text": (
            "Tool 'broken' cannot run: this tool's packages failed to build; "
            "its author has been told."
        )}], result  # fmt: skip
        # Its author's test run: why, and what to do.
        run = server.api("POST", "/api/tools/broken/run", json={"arguments": {}})
        assert run.status_code == 200, run.text
        told = run.json()["mcp_result"]["content"][0]["text"]
        assert "failed to build" in told
        assert "kiln-no-such-package-9f1c" in told
        assert f"kiln bundles retry {bundle_id}" in told

        retried = server.api("POST", f"/api/bundles/{bundle_id}/retry")
        assert retried.status_code == 202, retried.text
        assert retried.json()["status"] == "pending"
        wait_status(server, bundle_id, "failed")
        assert worker.wait_idle(10)
        assert worker.builds_started == 2
        assert server.api("GET", f"/api/bundles/{bundle_id}").json()["attempts"] == 2
    finally:
        worker.stop()


def test_bundle_routes_refuse_bad_ids_unknown_bundles_and_strangers(
    kiln_server: RunningKiln,
) -> None:
    assert kiln_server.api("GET", "/api/bundles", key=None).status_code == 401
    bad = kiln_server.api("GET", "/api/bundles/..%2Fetc")
    assert bad.status_code == 404
    unknown = kiln_server.api("POST", f"/api/bundles/{'0' * 32}/retry")
    assert unknown.status_code == 404
    assert "no such bundle" in unknown.json()["error"]["message"]
    assert kiln_server.api("GET", f"/api/bundles/{'0' * 32}").status_code == 404


def test_the_example_tools_with_packages_build_and_run(
    make_server: Callable[..., RunningKiln], kiln_settings: Settings
) -> None:
    from kiln.authoring import FolderTarget
    from kiln.catalog.files import push, tool_folders

    server, worker = start(make_server, kiln_settings)
    try:
        root = Path(__file__).resolve().parents[3] / "examples" / "tools"
        folders = [f for f in tool_folders(root) if f.name in ("humanize_bytes", "sort_unique")]
        push(FolderTarget(server.kiln.authoring), folders)
        assert worker.wait_idle(180)
        sizes = mcp_call(server, "humanize_bytes", {"sizes": [3_000_000, 1024], "binary": True})
        assert sizes.get("isError") is not True, sizes
        assert json.loads(sizes["content"][0]["text"]) == {"formatted": ["2.9 MiB", "1.0 KiB"]}
        numbers = mcp_call(server, "sort_unique", {"numbers": [3, 1, 3, 2, 1]})
        assert numbers.get("isError") is not True, numbers
        assert json.loads(numbers["content"][0]["text"]) == {"sorted": [1, 2, 3]}
        assert worker.builds_started == 2
    finally:
        worker.stop()


def count_bundle_downloads(aws: AwsStack) -> list[str]:
    keys: list[str] = []

    def count(params: dict[str, Any], **_: Any) -> None:
        if str(params.get("Key", "")).startswith("bundles/"):
            keys.append(params["Key"])

    aws.clients.s3.meta.events.register("before-parameter-build.s3.GetObject", count)
    return keys


def test_a_fresh_server_downloads_once_then_answers_fifty_calls_from_its_cache(
    make_server: Callable[..., RunningKiln], kiln_settings: Settings, aws: AwsStack, tmp_path: Path
) -> None:
    # The builder warms no standby: its own download of the bundle would count here.
    builder, worker = start(make_server, kiln_settings.with_(run_standby=0))
    try:
        created = builder.api("POST", "/api/tools", json={**HUMANIZE, "name": "humanize_bytes"})
        assert worker.wait_idle(120)
        bundle_id = created.json()["bundle_id"]
    finally:
        worker.stop()
    fresh = make_server(kiln_settings.with_(bundle_cache_dir=tmp_path / "fresh"))
    downloads = count_bundle_downloads(aws)
    results = [mcp_call(fresh, "humanize_bytes", {"bytes": 2048}) for _ in range(51)]
    assert all('"2.0 kB"' in r["content"][0]["text"] for r in results)
    assert downloads == [f"bundles/{bundle_id}.zip"]
    assert fresh.kiln.bundles is not None
    assert fresh.kiln.bundles.cache.unpacks == 1


def test_ten_concurrent_first_calls_on_a_fresh_server_unpack_once(
    make_server: Callable[..., RunningKiln], kiln_settings: Settings, aws: AwsStack, tmp_path: Path
) -> None:
    # The builder warms no standby: its own download of the bundle would count here.
    builder, worker = start(make_server, kiln_settings.with_(run_standby=0))
    try:
        builder.api("POST", "/api/tools", json={**HUMANIZE, "name": "humanize_bytes"})
        assert worker.wait_idle(120)
    finally:
        worker.stop()
    fresh = make_server(
        kiln_settings.with_(bundle_cache_dir=tmp_path / "fresh", max_concurrent_runs=10)
    )
    downloads = count_bundle_downloads(aws)
    barrier = threading.Barrier(10)
    texts: list[str] = []

    def first_call() -> None:
        barrier.wait()
        texts.append(mcp_call(fresh, "humanize_bytes", {"bytes": 5})["content"][0]["text"])

    threads = [threading.Thread(target=first_call) for _ in range(10)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert len(texts) == 10
    assert all('"5 Bytes"' in text for text in texts)
    assert len(downloads) == 1
    assert fresh.kiln.bundles is not None
    assert fresh.kiln.bundles.cache.unpacks == 1


def test_a_refused_save_starts_no_build(
    make_server: Callable[..., RunningKiln], kiln_settings: Settings
) -> None:
    server, worker = start(make_server, kiln_settings)
    try:
        plain = {**HUMANIZE, "requirements": [], "name": "taken"}
        assert server.api("POST", "/api/tools", json=plain).status_code == 201
        clash = server.api("POST", "/api/tools", json={**HUMANIZE, "name": "taken"})
        assert clash.status_code == 409
        stale = server.api(
            "PUT",
            "/api/tools/taken",
            json={**HUMANIZE, "name": "taken"},
            headers={"If-Match": '"9"'},
        )
        assert stale.status_code == 412
        assert server.api("GET", "/api/bundles").json()["bundles"] == []
        assert worker.builds_started == 0
    finally:
        worker.stop()
