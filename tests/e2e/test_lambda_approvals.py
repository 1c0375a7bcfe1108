"""An approval runs its tool once through the public Lambda function, across containers.

Two `mcp` functions (two execution environments: separate processes, one table, one
KILN_STATE_SECRET, as a deployment has) driven as Lambda drives them. A key with
`confirm: destructive` approves a destructive tool in one; the same approved invocation sent
to the other does not run it: the approval was spent in the store, under the mcp role's
template.yaml permissions (checked for every call, `support.iam_roles`).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from e2e.test_lambda_runtime import LambdaProcess, start_lambda
from e2e.test_lambda_talk import body_of, modern_event
from kiln.authoring import AuthoringService
from kiln.catalog.store import CatalogStore
from kiln.identity.keys import KeyStore
from support.aws import fresh_stack

WIPE = {
    "name": "wipe",
    "description": "Wipes a target.",
    "language": "python",
    "code": "print('wiped')\n",
    "annotations": {"destructiveHint": True, "readOnlyHint": False},
}


@pytest.fixture(scope="module")
def two(
    moto_endpoint: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[LambdaProcess, LambdaProcess, str]]:
    aws = fresh_stack(moto_endpoint, "kiln-e2e-approve")
    store = CatalogStore(aws.clients.dynamodb, aws.clients.s3, table=aws.table, bucket=aws.bucket)
    AuthoringService(store).create(WIPE, None)
    _, key = KeyStore(aws.clients.dynamodb, table=aws.table).create(
        "careful", "call", confirm="destructive"
    )
    env = {"KILN_STATE_SECRET": uuid.uuid4().hex}
    a, b = (tmp_path_factory.mktemp(f"lambda-approvals-{n}") for n in "ab")
    for one in start_lambda(a, moto_endpoint, aws.table, aws.bucket, extra_env=env):
        for other in start_lambda(b, moto_endpoint, aws.table, aws.bucket, extra_env=env):
            yield one, other, key


def keyed(key: str, **params: Any) -> dict[str, Any]:
    event = modern_event("wipe", **params)
    event["headers"]["authorization"] = f"Bearer {key}"
    return event


def test_an_approval_spent_in_one_container_does_not_run_the_tool_in_another(
    two: tuple[LambdaProcess, LambdaProcess, str],
) -> None:
    one, other, key = two
    asked = body_of(one, keyed(key))["result"]
    assert asked["resultType"] == "input_required", asked
    accept = {"action": "accept", "content": {"approve": True}}
    sent = {"inputResponses": {"kiln/approval": accept}, "requestState": asked["requestState"]}
    ran = body_of(one, keyed(key, **sent))["result"]
    assert ran["content"][0]["text"] == "wiped", ran
    again = body_of(other, keyed(key, **sent))["result"]
    assert again.get("resultType") == "input_required", f"ran twice from one approval: {again}"
    message = again["inputRequests"]["kiln/approval"]["params"]["message"]
    assert message.startswith("The approval sent with this call was already used"), message
    replayed_here = body_of(one, keyed(key, **sent))["result"]
    assert replayed_here.get("resultType") == "input_required", replayed_here
