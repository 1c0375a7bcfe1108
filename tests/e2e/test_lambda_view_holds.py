"""A view that follows a tool serves, through the public Lambda function, the revision before a
breaking one until its owner accepts it; a pinned view keeps its revision (kiln.access.holds).

The `mcp` function driven as Lambda drives it, under its template.yaml role (every AWS call
checked, `support.iam_roles`): reading the held-back revision is within what it may read.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from e2e.test_lambda_runtime import LambdaProcess, event_for, rpc, start_lambda
from e2e.test_lambda_talk import body_of
from kiln.access.pins import CatalogBinder
from kiln.access.view_store import ViewStore
from kiln.access.views import check_view
from kiln.authoring import AuthoringService
from kiln.catalog.store import CatalogStore
from support.aws import fresh_stack

CITY = {"type": "object", "properties": {"city": {"type": "string"}}}
TOOL = {"name": "weather", "description": "Weather.", "language": "python",
        "code": "print('sun')\n", "input_schema": CITY}  # fmt: skip


@pytest.fixture(scope="module")
def function(
    moto_endpoint: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[LambdaProcess, ViewStore, str]]:
    aws = fresh_stack(moto_endpoint, "kiln-e2e-holds")
    store = CatalogStore(aws.clients.dynamodb, aws.clients.s3, table=aws.table, bucket=aws.bucket)
    authoring = AuthoringService(store)
    tool = authoring.create(TOOL, None)
    views = ViewStore(aws.clients.dynamodb, table=aws.table, binder=CatalogBinder(store))
    for name, entry in (("follows", "weather"), ("pinned", "weather@1")):
        view = check_view({"name": name, "tools": [entry], "published": True, "anonymous": True})
        views.put(view, expected_revision=None)
    strict = {**TOOL, "input_schema": {**CITY, "required": ["city"]}, "breaking": True}
    authoring.update("weather", strict, None, expected_revision=1)
    for running in start_lambda(tmp_path_factory.mktemp("holds"), moto_endpoint, aws.table,
                                aws.bucket):  # fmt: skip
        yield running, views, tool.id


def listed(function: LambdaProcess, view: str) -> dict[str, Any]:
    event = event_for("http-api-tools-call.json", rpc("tools/list", {}))
    event["rawPath"] = event["requestContext"]["http"]["path"] = f"/mcp/v/{view}"
    tools = body_of(function, event)["result"]["tools"]
    return dict(next(tool for tool in tools if tool["name"] == "weather"))


def test_the_public_function_holds_a_breaking_revision_until_the_view_owner_accepts(
    function: tuple[LambdaProcess, ViewStore, str],
) -> None:
    running, views, tool_id = function
    assert "required" not in listed(running, "follows")["inputSchema"], "took r2 unaccepted"
    assert "required" not in listed(running, "pinned")["inputSchema"]
    views.accept("follows", tool_id, 2)
    assert listed(running, "follows")["inputSchema"]["required"] == ["city"]
    assert "required" not in listed(running, "pinned")["inputSchema"], "a pin moved"
