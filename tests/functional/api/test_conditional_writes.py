"""Every REST write's conditional failures answer 409/412 (or 404/428) with a JSON body, never 500.

Each catalog write (a tool's or a view's) is one DynamoDB transaction that also steps the
catalog's version item; a write whose own condition fails (a name taken, a stale If-Match,
a deleted tool) is refused as such, and one whose version step is taken by other writes every
time it tries (a crowd of writers) is refused as `catalog_busy`, nothing written. On 4f0be1a
the latter escaped as an unhandled TransactionCanceledException (500): the fuzz's
`PUT /api/tools/{name}` with If-Match and `is_active: false` among concurrent writes.

The rival writer below is another client of the same emulator that steps the version between
Kiln's read of it and its transaction, every time: what a crowd does, deterministically.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi import FastAPI

from conftest import AwsStack
from kiln.api import errors
from kiln.aws.clients import make_clients
from support.app import AUTHOR_KEY, RunningKiln, bound_socket, serve, settings_for

TOOL = {"name": "wipe", "description": "d", "language": "python", "code": "print('hi')\n"}


@pytest.fixture
def kiln(aws: AwsStack, tmp_path: Path) -> Iterator[RunningKiln]:
    yield from serve(settings_for(aws, tmp_path), aws)


@contextmanager
def rival_writer(aws: AwsStack) -> Iterator[list[int]]:
    """Steps the catalog version just before each of Kiln's transactions (counted)."""
    other = make_clients(endpoint_url=aws.endpoint_url, region="us-east-1").dynamodb
    stepped = [0]
    lock = threading.Lock()

    def step(**_: Any) -> None:
        other.update_item(
            TableName=aws.table,
            Key={"pk": {"S": "CATALOG"}, "sk": {"S": "VERSION"}},
            UpdateExpression="ADD version :one",
            ExpressionAttributeValues={":one": {"N": "1"}},
        )
        with lock:
            stepped[0] += 1

    events = aws.clients.dynamodb.meta.events
    events.register("before-call.dynamodb.TransactWriteItems", step, unique_id="rival")
    try:
        yield stepped
    finally:
        events.unregister("before-call.dynamodb.TransactWriteItems", unique_id="rival")


def refused(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, (
        f"{response.request.method} {response.request.url.path}: expected {status} {code}, got "
        f"{response.status_code}: {response.text}"
    )
    assert response.headers["content-type"] == "application/json", response.headers
    error = response.json()["error"]
    assert error["code"] == code, error
    assert error["message"], error
    return dict(error)


def made(kiln: RunningKiln, name: str = "wipe", **extra: Any) -> dict[str, Any]:
    created = kiln.api("POST", "/api/tools", json={**TOOL, "name": name, **extra})
    assert created.status_code == 201, created.text
    return dict(created.json())


def a_view(kiln: RunningKiln) -> None:
    assert kiln.api("POST", "/api/views", json={"name": "v", "tools": []}).status_code == 201


Write = Callable[[RunningKiln, dict[str, Any]], httpx.Response]
CATALOG_WRITES: dict[str, Write] = {
    "create": lambda k, t: k.api("POST", "/api/tools", json={**TOOL, "name": "other"}),
    "replace": lambda k, t: k.api("PUT", "/api/tools/wipe", headers={"If-Match": '"2"'},
                                  json={**TOOL, "is_active": False, "description": "x"}),
    "restore": lambda k, t: k.api("POST", "/api/tools/wipe/revisions/1/restore",
                                  headers={"If-Match": '"2"'}),
    "disable": lambda k, t: k.api("POST", "/api/tools/wipe/disable"),
    "rename": lambda k, t: k.api("POST", "/api/tools/wipe/rename", json={"name": "erase"}),
    "delete": lambda k, t: k.api("DELETE", "/api/tools/wipe"),
    "undelete": lambda k, t: k.api("POST", f"/api/tools/id:{t['gone']}/undelete"),
    "create view": lambda k, t: k.api("POST", "/api/views", json={"name": "w", "tools": []}),
    "replace view": lambda k, t: k.api("PUT", "/api/views/v", headers={"If-Match": '"1"'},
                                       json={"name": "v", "tools": ["wipe"]}),
    "delete view": lambda k, t: k.api("DELETE", "/api/views/v"),
}  # fmt: skip


@pytest.mark.parametrize("write", list(CATALOG_WRITES))
def test_a_catalog_write_that_loses_every_race_is_a_409_and_changes_nothing(
    kiln: RunningKiln, aws: AwsStack, write: str
) -> None:
    tool = made(kiln)
    changed = kiln.api("PUT", "/api/tools/wipe", headers={"If-Match": '"1"'},
                       json={**TOOL, "description": "two"})  # fmt: skip
    assert changed.status_code == 200, changed.text
    gone = made(kiln, "gone")
    assert kiln.api("DELETE", "/api/tools/gone").status_code == 200
    a_view(kiln)
    before = kiln.api("GET", "/api/tools", params={"include_deleted": "true"}).json()
    views_before = kiln.api("GET", "/api/views").json()
    with rival_writer(aws) as stepped:
        answer = CATALOG_WRITES[write](kiln, {"id": tool["id"], "gone": gone["id"]})
    error = refused(answer, 409, "catalog_busy")
    assert "nothing was changed, send it again" in error["message"]
    assert answer.headers["retry-after"] == "1"
    assert stepped[0] >= 2, "the rival never raced the write"
    assert kiln.api("GET", "/api/tools", params={"include_deleted": "true"}).json() == before
    assert kiln.api("GET", "/api/views").json() == views_before
    again = CATALOG_WRITES[write](kiln, {"id": tool["id"], "gone": gone["id"]})
    assert again.status_code in (200, 201), again.text  # sent again alone, it is written


def test_each_tool_writes_own_conditions_answer_their_status_with_a_json_body(
    kiln: RunningKiln,
) -> None:
    made(kiln)
    made(kiln, "taken")
    refused(kiln.api("POST", "/api/tools", json=TOOL), 409, "name_taken")
    body = {**TOOL, "is_active": False, "description": "x"}
    refused(kiln.api("PUT", "/api/tools/wipe", json=body), 428, "revision_required")
    assert kiln.api("PUT", "/api/tools/wipe", headers={"If-Match": '"1"'},
                    json=body).status_code == 200  # fmt: skip
    stale = refused(kiln.api("PUT", "/api/tools/wipe", headers={"If-Match": '"1"'}, json=body),
                    412, "stale_revision")  # fmt: skip
    assert stale["current_revision"] == 2
    refused(kiln.api("POST", "/api/tools/wipe/revisions/1/restore", headers={"If-Match": '"1"'}),
            412, "stale_revision")  # fmt: skip
    rename = kiln.api("POST", "/api/tools/wipe/rename", json={"name": "taken"})
    refused(rename, 409, "name_taken")
    tool_id = made(kiln, "doomed")["id"]
    refused(kiln.api("POST", f"/api/tools/id:{tool_id}/undelete"), 409, "not_deleted")
    assert kiln.api("DELETE", "/api/tools/doomed").status_code == 200
    refused(kiln.api("DELETE", "/api/tools/doomed"), 404, "not_found")
    refused(kiln.api("POST", f"/api/tools/id:{tool_id}/disable"), 404, "not_found")
    refused(kiln.api("PUT", f"/api/tools/id:{tool_id}", headers={"If-Match": '"1"'},
                     json={**TOOL, "name": "doomed"}), 404, "not_found")  # fmt: skip
    made(kiln, "doomed")  # the name is taken again: the deleted one cannot come back under it
    refused(kiln.api("POST", f"/api/tools/id:{tool_id}/undelete"), 409, "name_taken")


def test_each_view_and_key_writes_own_conditions_answer_their_status_with_a_json_body(
    kiln: RunningKiln,
) -> None:
    a_view(kiln)
    refused(kiln.api("POST", "/api/views", json={"name": "v", "tools": []}), 409, "name_taken")
    view = {"name": "v", "tools": []}
    refused(kiln.api("PUT", "/api/views/v", json=view), 409, "name_taken")
    assert kiln.api("PUT", "/api/views/v", headers={"If-Match": '"1"'}, json=view).is_success
    refused(kiln.api("PUT", "/api/views/v", headers={"If-Match": '"1"'}, json=view),
            412, "stale_revision")  # fmt: skip
    refused(kiln.api("PUT", "/api/views/nope", headers={"If-Match": '"1"'},
                     json={"name": "nope", "tools": []}), 404, "not_found")  # fmt: skip
    assert kiln.api("DELETE", "/api/views/v").is_success
    refused(kiln.api("DELETE", "/api/views/v"), 404, "not_found")
    key = {"name": "ci", "scope": "call"}
    assert kiln.api("POST", "/api/keys", json=key).status_code == 201
    refused(kiln.api("POST", "/api/keys", json=key), 409, "name_taken")
    assert kiln.api("DELETE", "/api/keys/ci").is_success
    refused(kiln.api("DELETE", "/api/keys/ci"), 404, "not_found")
    refused(kiln.api("PUT", "/api/keys/ci/binding", json={}), 404, "not_found")


def test_concurrent_saves_of_one_tool_are_answered_200_409_or_412_never_500(
    kiln: RunningKiln,
) -> None:
    """The fuzz's shape: writers read the ETag and PUT with If-Match, `is_active` flipping."""
    made(kiln)
    headers = {"Authorization": f"Bearer {AUTHOR_KEY}"}

    def writer(n: int) -> list[httpx.Response]:
        answers = []
        with httpx.Client(base_url=kiln.url, headers=headers, timeout=60) as http:
            for round_ in range(4):
                etag = http.get("/api/tools/wipe").headers["etag"]
                body = {**TOOL, "is_active": (n + round_) % 2 == 0, "description": f"{n}.{round_}"}
                answers.append(http.put("/api/tools/wipe", headers={"If-Match": etag}, json=body))
        return answers

    with ThreadPoolExecutor(8) as pool:
        answers = [a for batch in pool.map(writer, range(8)) for a in batch]
    for answer in answers:
        assert answer.status_code in (200, 409, 412), f"{answer.status_code}: {answer.text}"
        assert answer.headers["content-type"] == "application/json"
    assert any(a.status_code == 200 for a in answers)


def test_a_conditional_failure_no_domain_error_names_is_still_a_409_with_a_json_body(
    aws: AwsStack,
) -> None:
    """The edge's net under every translation: a store refusal for a condition that reached
    it untranslated is a 409 (logged); any other store error stays an internal 500."""
    app = FastAPI()
    errors.install(app)
    item = {"pk": {"S": "QUOTA#net"}, "sk": {"S": "X"}}
    aws.clients.dynamodb.put_item(TableName=aws.table, Item=item)

    @app.post("/api/again")
    def again() -> None:
        aws.clients.dynamodb.put_item(
            TableName=aws.table, Item=item, ConditionExpression="attribute_not_exists(pk)"
        )

    @app.post("/api/keyless")
    def keyless() -> None:  # no sort key: the store's ValidationException
        aws.clients.dynamodb.put_item(TableName=aws.table, Item={"pk": {"S": "QUOTA#net"}})

    sock = bound_socket()
    config = uvicorn.Config(app, log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        conflict = httpx.post(url + "/api/again")
        error = refused(conflict, 409, "conflict")
        assert error["message"] == (
            "another write changed this at the same moment; read it again and retry"
        )
        refused(httpx.post(url + "/api/keyless"), 500, "internal")
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
