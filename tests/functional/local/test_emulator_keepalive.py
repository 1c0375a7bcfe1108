"""The emulator keeps HTTP/1.1 connections open between requests (emulator/keepalive.py):
werkzeug's own handler closed every one, so each store call opened a TCP connection."""

from __future__ import annotations

import http.client
from pathlib import Path
from urllib.parse import urlsplit

from kiln.aws.clients import ensure_resources, make_clients
from kiln.local.emulator import run_emulator


def test_one_connection_carries_request_after_request(tmp_path: Path) -> None:
    with run_emulator(tmp_path) as endpoint:
        url = urlsplit(endpoint.url)
        connection = http.client.HTTPConnection(url.hostname or "", url.port, timeout=30)
        answers = []
        for _ in range(3):  # unsigned: each is refused, on the same connection
            connection.request("POST", "/", body=b"{}", headers={"Content-Type": "x"})
            answer = connection.getresponse()
            answers.append((answer.status, answer.getheader("Connection"), answer.read()[:40]))
            socket = connection.sock
            assert socket is not None, f"the emulator closed the connection after {answers}"
        connection.close()
    assert [status for status, _, _ in answers] == [403, 403, 403], answers
    assert all(header != "close" for _, header, _ in answers), answers


def test_botocores_calls_are_answered_without_closing_the_connection(tmp_path: Path) -> None:
    with run_emulator(tmp_path) as endpoint:
        keys = (endpoint.credentials.access_key_id, endpoint.credentials.secret_access_key)
        clients = make_clients(endpoint_url=endpoint.url, region=endpoint.region, credentials=keys)
        ensure_resources(clients, table="kiln-keepalive", bucket="kiln-keepalive")
        said: list[str | None] = []
        clients.dynamodb.meta.events.register(
            "after-call.dynamodb",
            lambda http_response, **_: said.append(http_response.headers.get("Connection")),
        )
        key = {"pk": {"S": "a"}, "sk": {"S": "b"}}
        clients.dynamodb.put_item(TableName="kiln-keepalive", Item=key)
        clients.dynamodb.get_item(TableName="kiln-keepalive", Key=key)
        clients.dynamodb.describe_table(TableName="kiln-keepalive")  # through moto's web app
        clients.s3.put_object(Bucket="kiln-keepalive", Key="k", Body=b"x")
        head = clients.s3.head_object(Bucket="kiln-keepalive", Key="k")
        got = clients.s3.get_object(Bucket="kiln-keepalive", Key="k")["Body"].read()
    assert said == [None, None, None], said
    assert head["ContentLength"] == 1  # a HEAD's length is the object's, its body empty
    assert got == b"x"
