"""kiln.aws.invoke: the runner function's invoke, signed by SigV4Auth, sent without a client.

A real HTTP server on 127.0.0.1 records what arrives; the same invoke sent by botocore's own
Lambda client is the reference for what Lambda must receive.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import botocore.session
import pytest
from botocore.config import Config
from botocore.credentials import Credentials

from kiln.aws.invoke import InvokeError, SignedInvoke
from support.aws import answer, serving

CREDENTIALS = Credentials("AKIDEXAMPLE", "secret-example", "session-token-example")


class Recorder(ThreadingHTTPServer):
    answer: tuple[int, dict[str, str], bytes] = (200, {}, b"{}")
    seen: list[dict[str, Any]]


class Handler(BaseHTTPRequestHandler):
    server: Recorder

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.seen.append({"path": self.path, "headers": dict(self.headers), "body": body})
        answer(self, *self.server.answer)


@pytest.fixture
def lambda_api() -> Iterator[Recorder]:
    server = Recorder(("127.0.0.1", 0), Handler)
    server.seen = []
    with serving(server):
        yield server


def url(server: Recorder) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}"


def botocore_client(server: Recorder) -> Any:
    session = botocore.session.Session()
    session.set_credentials(CREDENTIALS.access_key, CREDENTIALS.secret_key, CREDENTIALS.token)
    config = Config(retries={"total_max_attempts": 1})
    return session.create_client(
        "lambda", region_name="eu-west-1", endpoint_url=url(server), config=config
    )


def signed_header_names(authorization: str) -> set[str]:
    return set(authorization.split("SignedHeaders=")[1].split(",")[0].split(";"))


def test_the_signed_invoke_sends_what_botocores_own_client_sends(lambda_api: Recorder) -> None:
    payload = json.dumps({"kiln_run": 1, "tenant": "tool-1"}).encode()
    lambda_api.answer = (200, {"X-Amz-Function-Error": "Unhandled"}, b'{"errorMessage": "x"}')
    botocore_client(lambda_api).invoke(
        FunctionName="kiln-runner", InvocationType="RequestResponse", TenantId="tool-1",
        Payload=payload,
    )  # fmt: skip
    answer = SignedInvoke(CREDENTIALS, "eu-west-1", endpoint_url=url(lambda_api)).invoke(
        FunctionName="kiln-runner", InvocationType="RequestResponse", TenantId="tool-1",
        Payload=payload,
    )  # fmt: skip
    reference, ours = lambda_api.seen
    assert ours["path"] == reference["path"] == "/2015-03-31/functions/kiln-runner/invocations"
    assert ours["body"] == reference["body"] == payload
    for name in ("X-Amz-Invocation-Type", "X-Amz-Tenant-Id", "X-Amz-Security-Token"):
        assert ours["headers"][name] == reference["headers"][name], name
    theirs, mine = reference["headers"]["Authorization"], ours["headers"]["Authorization"]
    scope = "/eu-west-1/lambda/aws4_request"
    assert mine.startswith("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/"), mine
    assert scope in mine, mine
    assert signed_header_names(theirs) <= signed_header_names(mine), (theirs, mine)
    assert {"x-amz-tenant-id", "x-amz-invocation-type"} <= signed_header_names(mine), mine
    assert answer["FunctionError"] == "Unhandled"
    assert answer["Payload"].read() == b'{"errorMessage": "x"}'


def test_a_refused_invoke_says_lambdas_error_type_and_message(lambda_api: Recorder) -> None:
    lambda_api.answer = (
        429,
        {"x-amzn-ErrorType": "TooManyRequestsException:http://internal.amazon.com/"},
        b'{"Type": "User", "message": "Rate exceeded"}',
    )
    invoker = SignedInvoke(CREDENTIALS, "us-east-1", endpoint_url=url(lambda_api))
    with pytest.raises(InvokeError, match=r"^TooManyRequestsException: Rate exceeded$"):
        invoker.invoke(FunctionName="kiln-runner", InvocationType="RequestResponse",
                       TenantId="tool-1", Payload=b"{}")  # fmt: skip


def test_without_credentials_the_invoke_is_refused_before_anything_is_sent(
    lambda_api: Recorder,
) -> None:
    invoker = SignedInvoke(None, "us-east-1", endpoint_url=url(lambda_api))
    with pytest.raises(InvokeError, match="no AWS credentials"):
        invoker.invoke(FunctionName="kiln-runner", InvocationType="RequestResponse",
                       TenantId="tool-1", Payload=b"{}")  # fmt: skip
    assert lambda_api.seen == []
