"""A save on Lambda starts the tool's runner environment, and runs nothing (Lambda profile).

The admin function saves a tool; with KILN_WARM_ON_SAVE (the default) it sends the runner
function one asynchronous invoke (`kiln_warm`) with the tool's tenant, which the Invoke
stand-in answers 202 and runs as Lambda does. The tool's script, were it run, would call a
listener of the test's: the warm-up must never reach it, write no ledger entry and use no
quota, and the author's first test run must be served by the environment it started. A
warm-up Lambda refuses (throttled) is logged and never fails the save; off, none is sent.
A warm-up that names a built bundle leaves it unpacked for the first run, which then needs S3
no more; one for another tenant than the environment's is refused.
"""

from __future__ import annotations

import json
import os
import re
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from conftest import AwsStack
from e2e.lambda_profile import (
    REQUIREMENTS,
    TARGET,
    Environment,
    TenantInvoke,
    admin_function,
    ready_bundle,
)
from e2e.test_lambda_profile import EVENTS, admin_run_event

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the profile's sandbox needs root")

WARM_WAIT_S = 60.0  # a fresh environment's init, on a loaded machine


class Listener:
    """Counts the requests a run of the tool makes (its only side effect)."""

    def __init__(self) -> None:
        self.hits: list[str] = []
        hits = self.hits

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                hits.append(self.path)
                self.send_response(204)
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def listener() -> Iterator[Listener]:
    found = Listener()
    yield found
    found.close()


def runners_for(aws: AwsStack, tmp: Path, listener: Listener, **env: str) -> TenantInvoke:
    tmp.chmod(0o755)
    store_env = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_ENDPOINT_URL": aws.endpoint_url,
        "KILN_TABLE": aws.table,
        "KILN_BUCKET": aws.bucket,
        "KILN_RUN_TCP_PORTS": "all",  # the tool's run may reach the test's listener
        **env,
    }
    return TenantInvoke(tmp / "runner", "runner", store_env, [aws.endpoint_url, listener.url])


def save_event(key: str, name: str, listener: Listener) -> dict[str, Any]:
    """An HTTP API event: an author's save, POST /api/tools, of a tool that calls `listener`."""
    code = f"import urllib.request\nurllib.request.urlopen('{listener.url}/ran', timeout=10)\n"
    code += "print('ran')\n"
    draft = {"name": name, "description": "Calls the test's listener when run.",
             "language": "python", "code": code, "timeout_seconds": 20,
             "input_schema": {"type": "object"}}  # fmt: skip
    event = json.loads((EVENTS / "http-api-admin-health.json").read_text())
    event["rawPath"] = event["requestContext"]["http"]["path"] = "/api/tools"
    event["routeKey"] = event["requestContext"]["routeKey"] = "ANY /api/{proxy+}"
    event["requestContext"]["http"]["method"] = "POST"
    event["headers"].update({"authorization": f"Bearer {key}",
                             "content-type": "application/json"})  # fmt: skip
    event["body"] = json.dumps(draft)
    return event


def saved(admin: Environment, key: str, name: str, listener: Listener) -> dict[str, Any]:
    answer = admin.invoke(save_event(key, name, listener), timeout_s=40)
    assert answer.kind == "response", f"{answer.payload}\n{admin.log()}"
    assert answer.payload["statusCode"] == 201, f"{answer.payload}\n{admin.log()}"
    body: dict[str, Any] = json.loads(answer.payload["body"])
    return body


def counted(aws: AwsStack) -> list[str]:
    """The table's call counts: ledger entries, their day totals, quota counters (pks)."""
    from kiln.aws.clients import make_clients

    dynamodb = make_clients(endpoint_url=aws.endpoint_url, region="us-east-1").dynamodb
    pages = dynamodb.get_paginator("scan").paginate(TableName=aws.table)
    pks = [item["pk"]["S"] for page in pages for item in page["Items"]]
    return [pk for pk in pks if re.match(r"LEDGER#|LEDGERSUM#\d|QUOTA#", pk)]


def test_a_save_starts_the_tools_runner_environment_without_running_it(
    aws: AwsStack, tmp_path: Path, listener: Listener
) -> None:
    runners = runners_for(aws, tmp_path, listener)
    name = f"e2e_warmed_{uuid.uuid4().hex[:6]}"
    try:
        with admin_function(tmp_path, runners) as (admin, key):
            tool = saved(admin, key, name, listener)
            assert [tenant for tenant, _ in runners.asked] == [tool["id"]], admin.log()
            with runners.events_done:
                done = runners.events_done.wait_for(lambda: runners.events, WARM_WAIT_S)
            assert done, f"the warm-up was not answered\n{admin.log()}"
            (tenant, event, answer) = runners.events[0]
            assert (tenant, event["kiln_warm"]) == (tool["id"], 1), event
            environment = runners.environments[tenant]
            assert answer == {"warm": True}, f"{answer}\n{environment.log()}"
            # Nothing of the tool ran, nothing was counted.
            assert listener.hits == [], environment.log()
            assert counted(aws) == []
            # The author's first test run finds the environment the save started.
            run = admin.invoke(admin_run_event(name, key), timeout_s=40)
            assert run.payload["statusCode"] == 200, f"{run.payload}\n{admin.log()}"
            assert json.loads(run.payload["body"])["stdout"] == "ran\n", run.payload
            assert listener.hits == ["/ran"]
            assert runners.served == [(tenant, environment.uid)] * 2, runners.served
            assert list(runners.environments) == [tenant]
            assert runners.ended == []
    finally:
        runners.close()


@pytest.mark.parametrize("case", ["throttled", "off"])
def test_a_warm_up_refused_or_off_never_fails_the_save(
    aws: AwsStack, tmp_path: Path, listener: Listener, case: str
) -> None:
    env = {"KILN_WARM_ON_SAVE": "false"} if case == "off" else {}
    runners = runners_for(aws, tmp_path, listener, **env)
    runners.refuse_events = case == "throttled"
    name = f"e2e_cold_{uuid.uuid4().hex[:6]}"
    try:
        with admin_function(tmp_path, runners) as (admin, key):
            tool = saved(admin, key, name, listener)
            if case == "throttled":  # asked, refused (429), logged: the save stands
                assert [tenant for tenant, _ in runners.asked] == [tool["id"]]
                assert "could not warm the runner environment" in admin.log(), admin.log()
            else:
                assert runners.asked == [], runners.asked
            assert runners.environments == {}
            run = admin.invoke(admin_run_event(name, key), timeout_s=40)  # it starts cold
            assert json.loads(run.payload["body"])["stdout"] == "ran\n", run.payload
            assert listener.hits == ["/ran"]
    finally:
        runners.close()


def test_the_warm_up_fetches_the_bundle_the_first_run_then_uses(
    aws: AwsStack, tmp_path: Path
) -> None:
    """The warm-up unpacks the tool's bundle into the cache the runs use: the first run needs
    S3 no more (its zip is deleted in between); a warm-up for another tenant is refused."""
    from kiln.bundles.store import BundleStore
    from kiln.runner import RunRequest
    from kiln.runner.remote import encode

    ready_bundle(aws.clients, aws.table, aws.bucket)
    store = BundleStore(aws.clients.dynamodb, aws.clients.s3, table=aws.table, bucket=aws.bucket)
    record = store.ensure("python", TARGET, REQUIREMENTS)
    assert record is not None
    tmp_path.chmod(0o755)
    tenant = f"tool-{uuid.uuid4().hex[:8]}"
    env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "AWS_ENDPOINT_URL": aws.endpoint_url, "KILN_TABLE": aws.table,
           "KILN_BUCKET": aws.bucket}  # fmt: skip
    runner = Environment(tmp_path / "runner", "runner", env, [aws.endpoint_url], tenant=tenant)
    try:
        other = runner.invoke({"kiln_warm": 1, "tenant": "another-tool", "bundle": None})
        assert other.payload == {"error": "the payload's tenant is not this environment's"}
        warm_up = {"kiln_warm": 1, "tenant": tenant, "bundle": record.to_json()}
        answer = runner.invoke(warm_up, timeout_s=60)
        assert answer.payload == {"warm": True}, f"{answer.payload}\n{runner.log()}"
        aws.clients.s3.delete_object(Bucket=aws.bucket, Key=record.zip_key)
        code = "import shared_mod\nprint(shared_mod.VALUE)\n"
        request = RunRequest(language="python", code=code, arguments={}, timeout_s=20)
        event = encode(request, tenant=tenant, tool_id=tenant, bundle=record.to_json())
        run = runner.invoke(event, timeout_s=60).payload
        assert run["result"]["stdout"] == "original\n", f"{run}\n{runner.log()}"
    finally:
        runner.close()
