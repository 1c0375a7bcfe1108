"""No cold first call: saved and recently called tools get their standby before any call."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import AwsStack
from kiln.accounting.ledger import CallRecord
from kiln.catalog.model import Tool
from kiln.settings import Settings
from kiln.stack import Kiln, build_kiln, prepare_process
from support.app import AUTHOR_KEY, RunningKiln
from support.iam_roles import call_log, read_new


def tool(name: str, code: str, **extra: object) -> dict[str, object]:
    return {"name": name, "description": "A tool.", "language": "python", "code": code, **extra}


@pytest.fixture
def settings(aws: AwsStack, tmp_path: Path) -> Settings:
    return Settings(
        table=aws.table, bucket=aws.bucket, endpoint_url=aws.endpoint_url, region="us-east-1",
        author_key=AUTHOR_KEY, bundle_cache_dir=tmp_path / "bundles",
        build_cache_dir=tmp_path / "build-cache", local_time_budget_s=30.0,
    )  # fmt: skip


@pytest.fixture
def kiln(settings: Settings, aws: AwsStack) -> Iterator[Kiln]:
    prepare_process()
    kiln = build_kiln(settings, clients=aws.clients)
    if not kiln.runner.standby_capable:
        kiln.close_runner()
        pytest.skip("runs are not fenced from each other here (no uid per run, no Landlock)")
    yield kiln
    kiln.close_runner()


def wait_for_standbys(kiln: Kiln, count: int, within_s: float = 60.0) -> None:
    give_up = time.monotonic() + within_s
    while kiln.runner.standbys < count:
        assert time.monotonic() < give_up, f"{kiln.runner.standbys} standbys, wanted {count}"
        time.sleep(0.05)


def first_call(kiln: Kiln, saved: Tool) -> tuple[str, bool]:
    outcome, result = asyncio.run(kiln.backend.execute(saved, {}, time_left_s=None))
    assert result is not None, outcome.text
    return outcome.text, result.standby


def test_a_saved_tool_s_first_call_starts_from_a_standby(kiln: Kiln) -> None:
    saved = kiln.authoring.create(tool("greet", "print('hello')"), None)
    wait_for_standbys(kiln, 1)
    assert first_call(kiln, saved) == ("hello", True)


def test_an_updated_tool_is_warmed_at_its_new_code(kiln: Kiln) -> None:
    kiln.authoring.create(tool("greet", "print('old')"), None)
    wait_for_standbys(kiln, 1)
    updated = kiln.authoring.update(
        "greet", tool("greet", "print('new')"), None, expected_revision=1
    )
    wait_for_standbys(kiln, 2)
    assert first_call(kiln, updated) == ("new", True)


def test_a_saved_tool_s_secrets_are_fetched_before_its_first_call(kiln: Kiln) -> None:
    """Beside its standby (not before: the save does not wait for it). The first secrets
    request of a process makes its SSM client and, on the emulator, loads SSM's backend."""
    code = "import os; print(os.environ['SERVICE_TOKEN'][-4:])"
    kiln.authoring.create(tool("secretive", code, secrets=["SERVICE_TOKEN"]), None)
    kiln.authoring.set_secret("secretive", "SERVICE_TOKEN", "s3cr3t-9876", None)
    saved = kiln.authoring.update(
        "secretive", tool("secretive", code + " # r2", secrets=["SERVICE_TOKEN"]), None,
        expected_revision=1,
    )  # fmt: skip
    kiln.warmer.settle()
    fetched = call_log().stat().st_size
    assert first_call(kiln, saved) == ("9876", True)
    asked, _ = read_new(call_log(), fetched)
    by_call = [r for r in asked if r["service"] == "ssm" and saved.id in str(r.get("body"))]
    assert by_call == [], f"the first call fetched its secrets itself: {by_call}"


def test_a_disabled_tool_is_not_warmed(kiln: Kiln) -> None:
    saved = kiln.authoring.create(tool("quiet", "print(1)", enabled=False), None)
    assert not saved.enabled
    assert kiln.warmer.warm_soon(saved) is None
    kiln.warmer.close()
    assert kiln.runner.standbys == 0


@pytest.mark.slow
def test_a_tool_with_packages_is_warmed_once_its_bundle_is_built(kiln: Kiln) -> None:
    code = "import six; print(six.__version__)"
    saved = kiln.authoring.create(tool("sixer", code, requirements=["six==1.17.0"]), None)
    wait_for_standbys(kiln, 1, within_s=300)
    assert first_call(kiln, saved) == ("1.17.0", True)


def test_kiln_dev_warms_the_most_recently_called_tools_first_within_the_budget(
    settings: Settings, aws: AwsStack
) -> None:
    first = build_kiln(settings.with_(run_standby=2), clients=aws.clients)
    try:
        for name in ("old", "middle", "newest"):
            first.authoring.create(tool(name, f"print({name!r})"), None)
        assert first.gate.ledger is not None
        calls = ("old", "middle", "newest", "middle")  # newest first: middle, newest, old
        for seconds_ago, name in zip((40, 30, 20, 10), calls, strict=True):
            entry = CallRecord(at="", caller="anonymous", tool=name, outcome="ok")
            first.gate.ledger.record(entry, started=time.time() - seconds_ago)
    finally:
        first.close_runner()
    again = build_kiln(settings.with_(run_standby=2), clients=aws.clients)
    try:
        if not again.runner.standby_capable:
            pytest.skip("runs are not fenced from each other here")
        assert again.warm_recent() == ["middle", "newest"]
        wait_for_standbys(again, 2)
        assert first_call(again, again.store.get("middle")) == ("middle", True)
        assert first_call(again, again.store.get("old"))[1] is False
    finally:
        again.close_runner()


def test_of_many_saves_at_once_only_the_last_within_the_budget_are_warmed(
    settings: Settings, aws: AwsStack
) -> None:
    kiln = build_kiln(settings.with_(run_standby=2), clients=aws.clients)
    try:
        if not kiln.runner.standby_capable:
            pytest.skip("runs are not fenced from each other here")
        saved = [kiln.authoring.create(tool(f"t{n}", f"print({n})"), None) for n in range(6)]
        kiln.warmer.settle()
        assert kiln.runner.standbys == 2
        assert first_call(kiln, saved[5]) == ("5", True)
        assert first_call(kiln, saved[2])[1] is False  # queued behind newer saves: skipped
    finally:
        kiln.close_runner()


def standby_capable(server: RunningKiln) -> None:
    if not server.kiln.runner.standby_capable:
        pytest.skip("runs are not fenced from each other here (no uid per run, no Landlock)")


def save_new_revision(server: RunningKiln, name: str, code: str) -> None:
    """Create `name`, then save a new revision of it with `code`, over REST."""
    created = server.api("POST", "/api/tools", json=tool(name, "print('first')"))
    assert created.status_code == 201, created.text
    saved = server.api(
        "PUT", f"/api/tools/{name}", json=tool(name, code),
        headers={"If-Match": created.headers["etag"]},
    )  # fmt: skip
    assert saved.status_code == 200, saved.text


def test_a_test_run_sent_as_soon_as_a_save_answers_starts_from_its_standby(
    kiln_server: RunningKiln,
) -> None:
    standby_capable(kiln_server)
    save_new_revision(kiln_server, "greet", "print('second')")
    # No waiting here: the save answered once the new revision's run was prepared.
    run = kiln_server.api("POST", "/api/tools/greet/run", json={"arguments": {}})
    assert run.status_code == 200, run.text
    body = run.json()
    assert (body["stdout"], body["standby"]) == ("second\n", True), body


def test_a_node_tool_s_save_answers_once_its_standby_has_started_node(
    kiln_server: RunningKiln,
) -> None:
    """The save waits until Node has started up to its preload and waits for the call, so
    that a call sent at once does not wait for Node's start."""
    standby_capable(kiln_server)
    created = kiln_server.api(
        "POST", "/api/tools", json=tool("greet", "console.log(1)", language="node")
    )
    assert created.status_code == 201, created.text
    saved = kiln_server.api(
        "PUT", "/api/tools/greet", json=tool("greet", "console.log('second')", language="node"),
        headers={"If-Match": created.headers["etag"]},
    )  # fmt: skip
    assert saved.status_code == 200, saved.text
    run = kiln_server.api("POST", "/api/tools/greet/run", json={"arguments": {}})
    assert run.status_code == 200, run.text
    body = run.json()
    assert (body["stdout"], body["standby"], body["ready"]) == ("second\n", True, True), body


def test_the_first_tools_call_as_soon_as_a_save_answers_starts_from_its_standby(
    kiln_server: RunningKiln,
) -> None:
    standby_capable(kiln_server)
    save_new_revision(kiln_server, "greet", "print('second')")
    before = kiln_server.kiln.runner.runs_from_standby
    params = {"name": "greet", "arguments": {}}
    answer = kiln_server.mcp({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params})
    assert answer.status_code == 200, answer.text
    result = answer.json()["result"]
    assert result["content"][0]["text"] == "second", result
    assert kiln_server.kiln.runner.runs_from_standby == before + 1, "the call started cold"


@pytest.mark.slow
def test_a_tool_whose_bundle_is_building_does_not_hold_up_the_next_save_s_standby(
    kiln: Kiln,
) -> None:
    """A warm-up waiting for a build waits on its own thread: the tool saved after it gets
    its standby before the save answers."""
    code = "import six; print(six.__version__)"
    kiln.authoring.create(tool("sixer", code, requirements=["six==1.17.0"]), None)
    saved = kiln.authoring.create(tool("plain", "print('plain')"), None)
    assert first_call(kiln, saved) == ("plain", True)
