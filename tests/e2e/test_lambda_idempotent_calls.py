"""Idempotent calls under the Lambda profile: the public `mcp` function times out after a keyed
call's run, and the retries, in a fresh environment, are answered with its result.

The `mcp` function reaches the store through a fault proxy that lets the write keeping the
call's answer through but throws its replies away (both of botocore's attempts), so the
invocation outlives its deadline after the tool ran and its answer was stored, as a slow store
would make it. Lambda ends a timed-out environment; the test does too, and sends the same call
again to a new one 19 times: the tool (in its tenant of the runner function, posting to a
tally) ran once, and every answer is the same.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.lambda_profile import Environment, TenantInvoke
from e2e.runtime_api import RuntimeApiError
from e2e.test_lambda_runtime import event_for, rpc
from kiln.catalog.rules import check_draft
from kiln.catalog.store import CatalogStore
from support.aws import fresh_stack
from support.faultproxy import FaultProxy, fault_proxy
from support.tally import TOOL, Tally, tally

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the profile's sandbox needs root")

KEEP_WRITE = b"#state = :done"  # the update that keeps a keyed call's answer


def keyed_call(arguments: dict[str, Any], idem: str) -> dict[str, Any]:
    params = {"name": TOOL["name"], "arguments": arguments, "_meta": {"kiln/idempotency-key": idem}}
    event = event_for("http-api-tools-call.json", rpc("tools/call", params))
    event["headers"]["mcp-protocol-version"] = "2025-11-25"
    return event


class Functions:
    """The `mcp` function (a fresh environment on demand, as after a timeout) and its runner."""

    def __init__(self, tmp: Path, moto: str, proxy: FaultProxy, counter: Tally, table: str):
        store_env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                     "KILN_TABLE": table, "KILN_BUCKET": table}  # fmt: skip
        self.tmp = tmp
        self.runners = TenantInvoke(
            tmp / "runner", "runner", {**store_env, "AWS_ENDPOINT_URL": moto}, [moto, counter.url]
        )
        self.env = {**store_env, "AWS_ENDPOINT_URL": proxy.url, "KILN_PUBLIC_ANONYMOUS": "true",
                    "KILN_RUNNER_FUNCTION": "kiln-runner", "KILN_RUNNER_TENANT": "tool",
                    "KILN_RUNNER_ENDPOINT_URL": self.runners.url}  # fmt: skip
        self.stores = [proxy.url, self.runners.url]
        self.made = 0
        self.mcp = self.fresh()

    def fresh(self) -> Environment:
        self.made += 1
        return Environment(self.tmp / f"mcp-{self.made}", "mcp", self.env, self.stores)

    def replace_mcp(self) -> None:
        """What Lambda does with an environment whose invocation timed out."""
        self.mcp.close()
        self.mcp = self.fresh()

    def close(self) -> None:
        self.mcp.close()
        self.runners.close()


@pytest.fixture
def counter() -> Iterator[Tally]:
    with tally() as found:
        yield found


@pytest.fixture
def functions(
    moto_endpoint: str, tmp_path_factory: pytest.TempPathFactory, counter: Tally
) -> Iterator[tuple[Functions, FaultProxy]]:
    aws = fresh_stack(moto_endpoint, "kiln-idem")
    store = CatalogStore(aws.clients.dynamodb, aws.clients.s3, table=aws.table, bucket=aws.bucket)
    store.create(check_draft(TOOL), actor="e2e")
    tmp = tmp_path_factory.mktemp("idempotent")
    tmp.chmod(0o755)
    with fault_proxy(moto_endpoint) as proxy:
        both = Functions(tmp, moto_endpoint, proxy, counter, aws.table)
        try:
            yield both, proxy
        finally:
            both.close()


def body(functions: Functions, event: dict[str, Any]) -> dict[str, Any]:
    answer = functions.mcp.invoke(event, timeout_s=60)
    log = functions.mcp.log()
    assert answer.kind == "response", f"{answer.payload}\n--- mcp log:\n{log}"
    assert answer.payload["statusCode"] == 200, f"{answer.payload}\n--- mcp log:\n{log}"
    found: dict[str, Any] = json.loads(answer.payload["body"])
    assert "result" in found, f"{found}\n--- mcp log:\n{log}"
    return found


def test_a_lambda_timeout_after_the_run_leaves_twenty_calls_with_one_key_one_run(
    functions: tuple[Functions, FaultProxy], counter: Tally
) -> None:
    both, proxy = functions
    warm = body(both, keyed_call({"url": counter.url, "label": "warm"}, str(uuid.uuid4())))
    assert warm["result"]["isError"] is False, warm  # the runner's tenant is warm now
    arguments, idem = {"url": counter.url, "label": "timed-out"}, str(uuid.uuid4())
    proxy.lose_replies(2, KEEP_WRITE)  # both attempts land; neither hears back
    try:
        late = both.mcp.invoke(keyed_call(arguments, idem), timeout_s=5.5)
    except RuntimeApiError:
        late = None  # no answer at all: timed out
    assert late is None or late.answered_ms > late.deadline_ms, (
        f"answered in time, so nothing timed out: {late}\n--- mcp log:\n{both.mcp.log()}"
    )
    assert counter.runs("timed-out") == 1, both.mcp.log()  # it ran before the timeout
    assert proxy.replies_left_to_lose == 0, "the answer was never kept"
    both.replace_mcp()
    invoked = len(both.runners.served)
    answers = [body(both, keyed_call(arguments, idem)) for _ in range(19)]
    assert counter.runs("timed-out") == 1, both.mcp.log()
    assert len(both.runners.served) == invoked, "a retry reached the runner function"
    first = {k: v for k, v in answers[0]["result"].items() if k != "_meta"}
    assert json.loads(first["content"][0]["text"])["run"] == 1, first
    for answer in answers:
        assert {k: v for k, v in answer["result"].items() if k != "_meta"} == first, answer
