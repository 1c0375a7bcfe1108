"""In AWS the admin function hands bundle ids to the builder function; here the Lambda Invoke
API is a loopback HTTP stand-in, and the builder's logic runs on what it received."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest

from conftest import AwsStack
from kiln.bundles.hooks import LazyLocalWorker, NoBuilder, make_bundles
from kiln.bundles.identity import default_target
from kiln.bundles.scheduler import LambdaBuildScheduler, handle_build_event
from kiln.bundles.store import BundleStore
from kiln.settings import Settings


class Invocations(BaseHTTPRequestHandler):
    received: ClassVar[list[dict[str, Any]]] = []

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        type(self).received.append(
            {
                "path": self.path,
                "type": self.headers.get("X-Amz-Invocation-Type"),
                "body": json.loads(self.rfile.read(length)),
            }
        )
        self.send_response(202)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def lambda_api() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    Invocations.received = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Invocations)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", Invocations.received
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.slow
def test_a_scheduled_build_is_an_asynchronous_invoke_the_builder_can_run(
    aws: AwsStack, lambda_api: tuple[str, list[dict[str, Any]]]
) -> None:
    endpoint, received = lambda_api
    client = aws.clients.session.client("lambda", endpoint_url=endpoint, region_name="us-east-1")
    store = BundleStore(aws.clients.dynamodb, aws.clients.s3, table=aws.table, bucket=aws.bucket)
    record = store.ensure("python", default_target("python"), ["six==1.17.0"])
    assert record is not None
    LambdaBuildScheduler(client, "kiln-dev-builder").schedule(record.id)
    [invocation] = received
    assert invocation["path"] == "/2015-03-31/functions/kiln-dev-builder/invocations"
    assert invocation["type"] == "Event"
    assert invocation["body"] == {"bundle_id": record.id}
    answer = handle_build_event(invocation["body"], None, store=store)
    assert answer == {"bundles": {record.id: {"status": "ready", "error": None}}}
    again = handle_build_event(invocation["body"], None, store=store)  # a duplicate event
    assert again["bundles"][record.id]["status"] == "ready"
    ready = store.get(record.id)
    assert ready is not None
    assert ready.attempts == 1


def test_who_builds_follows_the_settings(aws: AwsStack) -> None:
    settings = Settings(table=aws.table, bucket=aws.bucket, region="us-east-1")
    with_builder = make_bundles(
        settings.with_(builder_function="kiln-dev-builder").bundles, aws.clients
    )
    assert isinstance(with_builder.scheduler, LambdaBuildScheduler)
    assert with_builder.scheduler.function_name == "kiln-dev-builder"
    assert isinstance(make_bundles(settings.bundles, aws.clients).scheduler, LazyLocalWorker)
    lambda_env = {"AWS_LAMBDA_FUNCTION_NAME": "kiln-dev-admin", "KILN_TABLE": aws.table}
    in_lambda_settings = Settings.from_env(lambda_env).with_(bucket=aws.bucket)
    in_lambda = make_bundles(in_lambda_settings.bundles, aws.clients)
    assert isinstance(in_lambda.scheduler, NoBuilder)
    assert in_lambda.python_target.startswith("lambda-python3.")
    bundle_id = in_lambda.prepare("python", ("six",))
    assert bundle_id is not None
    record = in_lambda.store.get(bundle_id)
    assert record is not None
    assert record.status == "pending"
