"""kiln.aws.items: PutItem and GetItem signed and sent without the client, answering as it does.

Against the tests' emulator, the client's own answer to the same request is the reference. For
what the emulator does not do on demand (throttle one request, fail with a 5xx), a real HTTP
server on 127.0.0.1 stands in front of it: it answers the requests it was given answers for
and forwards every other one to the emulator as it came (signature included); the tests'
TCP fault proxy (support/faultproxy.py) cuts an answer off after the store has written.
"""

from __future__ import annotations

import http.client
import json
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

import pytest
from botocore.exceptions import ClientError

from kiln.aws.clients import CALLER_ROLE, StoreUnavailableError, make_clients
from support.aws import AwsStack, answer, serving
from support.faultproxy import fault_proxy

THROTTLED = (400, "ProvisionedThroughputExceededException", "Throughput exceeded for the table.")
FAILED = (500, "InternalServerError", "Internal server error")


class Front(ThreadingHTTPServer):
    daemon_threads = True
    upstream: str
    answers: list[tuple[int, str, str]]  # given answers, used first, one per request
    seen: list[dict[str, Any]]


class Handler(BaseHTTPRequestHandler):
    server: Front
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.seen.append({"headers": dict(self.headers), "body": json.loads(body)})
        if self.server.answers:
            status, code, message = self.server.answers.pop(0)
            payload = json.dumps({"__type": f"com.amazonaws.dynamodb.v20120810#{code}",
                                  "message": message}).encode()  # fmt: skip
            answer(self, status, {"Content-Type": "application/x-amz-json-1.0"}, payload)
            return
        parts = urlsplit(self.server.upstream)
        upstream = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=10)
        try:
            upstream.request("POST", self.path, body=body, headers=dict(self.headers))
            got = upstream.getresponse()
            payload = got.read()
            headers = {k: v for k, v in got.getheaders() if k.lower() != "content-length"}
            answer(self, got.status, headers, payload)
        finally:
            upstream.close()


@pytest.fixture
def front(aws: AwsStack) -> Iterator[Front]:
    server = Front(("127.0.0.1", 0), Handler)
    server.upstream, server.answers, server.seen = aws.endpoint_url, [], []
    with serving(server):
        yield server


def through(front: Front) -> Any:
    """The AWS clients of the tests' emulator, reached through `front`."""
    return make_clients(endpoint_url=f"http://127.0.0.1:{front.server_address[1]}",
                        region="us-east-1")  # fmt: skip


def item(name: str) -> dict[str, Any]:
    return {"pk": {"S": "ITEMS"}, "sk": {"S": name}, "n": {"N": "12.5"},
            "b": {"B": b"\x00\xffkiln"}, "tags": {"SS": ["a", "b"]}}  # fmt: skip


def targets(front: Front) -> list[str]:
    return [seen["headers"]["X-Amz-Target"].rpartition(".")[2] for seen in front.seen]


def test_an_item_written_and_read_comes_back_as_the_clients_own_read_gives_it(
    aws: AwsStack,
) -> None:
    written = aws.clients.items.put_item(TableName=aws.table, Item=item("one"))
    assert written["ResponseMetadata"]["HTTPStatusCode"] == 200, written
    key = {"pk": {"S": "ITEMS"}, "sk": {"S": "one"}}
    ours = aws.clients.items.get_item(TableName=aws.table, Key=key, ConsistentRead=True)
    theirs = aws.clients.dynamodb.get_item(TableName=aws.table, Key=key, ConsistentRead=True)
    assert ours["Item"] == theirs["Item"] == item("one")
    missing = {"pk": {"S": "ITEMS"}, "sk": {"S": "none"}}
    assert "Item" not in aws.clients.items.get_item(TableName=aws.table, Key=missing)


def test_a_failed_condition_is_the_clients_own_exception_with_what_it_carries(
    aws: AwsStack,
) -> None:
    aws.clients.dynamodb.put_item(TableName=aws.table, Item=item("taken"))
    refused: list[ClientError] = []
    for client in (aws.clients.dynamodb, aws.clients.items):
        with pytest.raises(aws.clients.dynamodb.exceptions.ConditionalCheckFailedException) as got:
            client.put_item(TableName=aws.table, Item=item("taken"),
                            ConditionExpression="attribute_not_exists(pk)",
                            ReturnValuesOnConditionCheckFailure="ALL_OLD")  # fmt: skip
        refused.append(got.value)
    theirs, ours = (error.response for error in refused)
    assert ours["Error"] == theirs["Error"], (ours, theirs)
    assert ours.get("Item") == theirs.get("Item"), (ours, theirs)
    assert ours["ResponseMetadata"]["HTTPStatusCode"] == 400


@pytest.mark.parametrize("first", [THROTTLED, FAILED], ids=["throttled", "5xx"])
def test_a_write_refused_for_now_is_retried_as_the_client_would_and_lands(
    aws: AwsStack, front: Front, first: tuple[int, str, str]
) -> None:
    front.answers = [first]
    answer = through(front).items.put_item(TableName=aws.table, Item=item("retried"))
    assert targets(front) == ["PutItem", "PutItem"], front.seen
    assert answer["ResponseMetadata"]["RetryAttempts"] == 1, answer
    key = {"pk": {"S": "ITEMS"}, "sk": {"S": "retried"}}
    stored = aws.clients.dynamodb.get_item(TableName=aws.table, Key=key, ConsistentRead=True)
    assert stored.get("Item") == item("retried"), "the retried write did not land"


def test_a_write_throttled_at_every_attempt_is_unavailable_after_the_clients_attempts(
    aws: AwsStack, front: Front
) -> None:
    clients = through(front)
    sent: dict[str, int] = {}
    for name in ("dynamodb", "items"):
        front.answers, front.seen = [THROTTLED] * 5, []
        with pytest.raises(StoreUnavailableError, match=r"PutItem: ProvisionedThroughput"):
            getattr(clients, name).put_item(TableName=aws.table, Item=item("never"))
        sent[name] = len(front.seen)
    assert sent["items"] == sent["dynamodb"] == 2, sent  # StoreDeadlines.attempts


def test_a_store_that_does_not_answer_is_unavailable_naming_the_operation() -> None:
    with ThreadingHTTPServer(("127.0.0.1", 0), Handler) as closed:
        port = closed.server_address[1]  # bound, then closed: nothing listens there
    clients = make_clients(endpoint_url=f"http://127.0.0.1:{port}", region="us-east-1")
    with pytest.raises(StoreUnavailableError, match=r"did not answer in time \(GetItem: "):
        clients.items.get_item(TableName="any", Key={"pk": {"S": "x"}, "sk": {"S": "y"}})


def test_each_request_carries_the_caller_role_for_the_emulators_call_log(
    aws: AwsStack, front: Front
) -> None:
    token = CALLER_ROLE.set("mcp")
    entry = {"pk": {"S": "LEDGER#2026-12-04#0"}, "sk": {"S": uuid.uuid4().hex}}  # its role's
    try:
        through(front).items.put_item(TableName=aws.table, Item=entry)
    finally:
        CALLER_ROLE.reset(token)
    assert [seen["headers"].get("X-Kiln-Role") for seen in front.seen] == ["mcp"], front.seen


def test_a_write_whose_answer_is_cut_off_is_sent_again_as_the_client_would_and_lands(
    aws: AwsStack,
) -> None:
    """The store wrote the item, the connection closed before its answer arrived: standard
    mode retries a ConnectionClosedError, and a PutItem written twice is the same item."""
    with fault_proxy(aws.endpoint_url) as proxy:
        proxy.lose_replies(1, b"cut-off", cut=True)
        clients = make_clients(endpoint_url=proxy.url, region="us-east-1")
        written = clients.items.put_item(TableName=aws.table, Item=item("cut-off"))
        assert proxy.replies_left_to_lose == 0, "the proxy never cut an answer off"
    assert written["ResponseMetadata"]["RetryAttempts"] == 1, written
    key = {"pk": {"S": "ITEMS"}, "sk": {"S": "cut-off"}}
    stored = aws.clients.dynamodb.get_item(TableName=aws.table, Key=key, ConsistentRead=True)
    assert stored.get("Item") == item("cut-off")
