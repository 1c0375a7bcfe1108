"""Tools that call tools under the Lambda profile (issue 38): the `mcp` function and its
tenant-isolated runner function, both sandboxed as Lambda runs them.

The outer run and each inner run are invocations of the runner function, each with the
TenantId of its own tool (the Invoke API stand-in records the tenant of every invocation it
serves, and the environment that served it: `TenantInvoke.served`); `execute` runs in a
tenant of its own per caller and view (`code-<digest>`), never a tool's; an inner call outside
the caller's view is refused in `mcp` and never reaches the runner function; a cycle ends at
the depth bound, and the count, time and quota bounds hold; a destructive inner call's
approval comes back through the outer call, one invocation per round, and runs the tool once
(on 2025 the inner call is refused); answers past the 6 MB invoke end the call saying so; a
hostile `execute` (the hostile tools' snoop, a daemon, a fork bomb) finds nothing of the
functions' secret or of an earlier run, and leaves nothing running.
"""

from __future__ import annotations

import json
import os
import re
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from e2e.lambda_profile import Environment, TenantInvoke, lambda_stack
from e2e.test_lambda_profile import runtime_and_helper_only
from e2e.test_lambda_runtime import event_for, rpc
from functional.local.test_inner_calls_on_dev import BIG, SLOW
from functional.protocol.test_inner_calls import CALLER, PING, RATE, WIPE
from functional.runner.test_hostile_execute import DAEMON, FORK_BOMB, with_stdin
from kiln.access.pins import CatalogBinder
from kiln.access.view_store import ViewStore
from kiln.access.views import check_view
from kiln.catalog.rules import check_draft
from kiln.catalog.store import CatalogStore
from support.aws import fresh_stack
from support.hostile_driver import SNOOP

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the profile's sandbox needs root")

MODERN = "2026-07-28"
OPEN = {"type": "object", "additionalProperties": True}
SAFE = {"readOnlyHint": False, "destructiveHint": False}


def draft(name: str, code: str, **more: Any) -> dict[str, Any]:
    return {"name": name, "description": f"{name}, for inner calls on Lambda.",
            "language": "python", "code": code, "timeout_seconds": 20, "input_schema": OPEN,
            "annotations": SAFE, **more}  # fmt: skip


@dataclass
class Stack:
    mcp: Environment
    runners: TenantInvoke
    ids: dict[str, str]  # tool name -> id (its runner tenant)
    runtime_secret: str  # in both functions' environment
    table: str  # and bucket


@pytest.fixture(scope="module")
def stack(moto_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    aws = fresh_stack(moto_endpoint, "kiln-inner")
    store = CatalogStore(aws.clients.dynamodb, aws.clients.s3, table=aws.table, bucket=aws.bucket)
    drafts = [
        draft("fx_rate", RATE, output_schema={"type": "object"}),
        draft("convert", CALLER, calls=["fx_rate", "hidden", "wipe", "big", "slow"]),
        draft("big", BIG),
        draft("slow", SLOW),
        draft("wipe", WIPE, annotations={"destructiveHint": True, "readOnlyHint": False}),
        draft("hidden", "print('hidden ran')\n"),
        draft("ping", PING, calls=["pong"]),
        draft("pong", PING, calls=["ping"]),
    ]
    ids = {d["name"]: store.create(check_draft(d), actor="e2e").id for d in drafts}
    views = ViewStore(aws.clients.dynamodb, table=aws.table, binder=CatalogBinder(store))
    for name, tools, mode in (
        ("team", ["fx_rate", "convert", "ping", "pong", "big", "slow"], "list"),
        ("coder", ["fx_rate"], "code"),
        ("coder2", ["fx_rate"], "code"),
        ("careful", ["convert", "wipe"], "list"),
        ("metered", ["fx_rate", "convert"], "list"),
    ):
        body = {"tools": tools, "mode": mode, "published": True, "anonymous": True}
        if name == "metered":
            body["quota"] = {"calls_per_minute": 3}
        if name == "careful":
            body["confirm"] = "destructive"
        views.put(check_view(body, name=name), expected_revision=None)
    tmp = tmp_path_factory.mktemp("inner")
    tmp.chmod(0o755)
    secret = "runtime-" + secrets.token_hex(12)
    with lambda_stack(tmp, moto_endpoint, aws.table, aws.bucket, runtime_secret=secret) as (
        mcp,
        runners,
    ):
        yield Stack(mcp, runners, ids, secret, aws.table)


def call_event(view: str, name: str, arguments: dict[str, Any], **more: Any) -> dict[str, Any]:
    meta = {"io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}}  # fmt: skip
    params = {"name": name, "arguments": arguments, **more, "_meta": meta}
    event = event_for("http-api-tools-call.json", rpc("tools/call", params))
    path = f"/mcp/v/{view}"
    event.update(rawPath=path, routeKey="ANY /mcp/v/{view}", pathParameters={"view": view})
    event["requestContext"]["http"]["path"] = path
    event["requestContext"]["routeKey"] = "ANY /mcp/v/{view}"
    event["headers"].update({"mcp-protocol-version": MODERN, "mcp-method": "tools/call",
                             "mcp-name": name})  # fmt: skip
    return event


def served(stack: Stack, event: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The call's result, and the tenant of each runner invocation it made, in order."""
    before = len(stack.runners.served)
    answer = stack.mcp.invoke(event, timeout_s=90)
    assert answer.kind == "response", f"{answer.payload}\n--- mcp log:\n{stack.mcp.log()}"
    response = answer.payload
    assert response["statusCode"] == 200, f"{response}\n--- mcp log:\n{stack.mcp.log()}"
    body = json.loads(response["body"])
    assert "result" in body, f"{body}\n--- mcp log:\n{stack.mcp.log()}"
    return body["result"], [tenant for tenant, _ in stack.runners.served[before:]]


def text(result: dict[str, Any]) -> str:
    return "\n".join(c.get("text", "") for c in result["content"])


def test_the_outer_run_and_each_inner_run_are_invocations_in_their_own_tools_tenants(
    stack: Stack,
) -> None:
    calls = [{"name": "fx_rate", "arguments": {"from": f}} for f in ("GBP", "EUR")]
    result, tenants = served(stack, call_event("team", "convert", {"calls": calls}))
    assert result.get("isError") is not True, f"{result}\n--- mcp log:\n{stack.mcp.log()}"
    got = json.loads(text(result))["got"]
    assert [a["structuredContent"] for a in got] == [{"rate": 1.25}, {"rate": 1.1}]
    convert, fx = stack.ids["convert"], stack.ids["fx_rate"]
    # One round per call (asked one at a time), then the last run with both answers.
    assert tenants == [convert, fx, convert, fx, convert], tenants
    # Tenants never share an environment: the two tools' runs had different sandboxes.
    uids = {tenant: uid for tenant, uid in stack.runners.served}
    assert uids[convert] != uids[fx]


def test_execute_runs_in_a_code_tenant_per_caller_and_view_never_a_tools(stack: Stack) -> None:
    code = "print(fx_rate(from_='GBP')['rate'] * 2)\n"
    result, tenants = served(stack, call_event("coder", "execute", {"code": code}))
    assert result.get("isError") is not True, f"{result}\n--- mcp log:\n{stack.mcp.log()}"
    assert text(result).strip() == "2.5"
    outer, inner, last = tenants
    assert inner == stack.ids["fx_rate"]
    assert outer == last
    assert outer.startswith("code-"), tenants
    assert outer not in stack.ids.values()
    # The same caller in another code view: another tenant; in this view again: the same.
    _, elsewhere = served(stack, call_event("coder2", "execute", {"code": "print(1)\n"}))
    _, again = served(stack, call_event("coder", "execute", {"code": "print(1)\n"}))
    assert elsewhere[0].startswith("code-"), elsewhere
    assert elsewhere[0] != outer
    assert again == [outer]


def test_an_inner_call_outside_the_view_is_refused_before_the_runner(stack: Stack) -> None:
    calls = [{"name": "hidden", "arguments": {}}]
    result, tenants = served(stack, call_event("team", "convert", {"calls": calls}))
    (answer,) = json.loads(text(result))["got"]
    assert answer["isError"] is True
    assert text(answer) == "The call of 'hidden' was refused: Unknown tool: hidden"
    assert stack.ids["hidden"] not in tenants, tenants
    assert set(tenants) == {stack.ids["convert"]}


def test_a_cycle_ends_at_the_depth_bound_on_lambda(stack: Stack) -> None:
    result, tenants = served(stack, call_event("team", "ping", {"to": "pong"}))
    assert result["isError"] is True, result
    assert "calls nest at most 4 deep (ping → pong → ping → pong → ping → pong)" in text(result)
    assert set(tenants) == {stack.ids["ping"], stack.ids["pong"]}


def test_a_destructive_inner_calls_approval_is_asked_through_the_outer_call_on_lambda(
    stack: Stack,
) -> None:
    """Each round a fresh invocation (nothing kept between them but the sealed state): the
    approval comes back under the inner call's key, the tool runs once on accept, and the
    same state sent again does not run it again (the approval was spent in the store)."""
    arguments = {"calls": [{"name": "wipe", "arguments": {"target": "db"}}]}
    first, tenants = served(stack, call_event("careful", "convert", arguments))
    assert first["resultType"] == "input_required", first
    assert list(first["inputRequests"]) == ["kiln/call/c0/kiln/approval"]
    assert stack.ids["wipe"] not in tenants
    accept = {"kiln/call/c0/kiln/approval": {"action": "accept", "content": {"approve": True}}}
    sent = {"inputResponses": accept, "requestState": first["requestState"]}
    done, tenants = served(stack, call_event("careful", "convert", arguments, **sent))
    (got,) = json.loads(text(done))["got"]
    assert text(got).strip() == "wiped db", got
    assert tenants.count(stack.ids["wipe"]) == 1, tenants
    again, tenants = served(stack, call_event("careful", "convert", arguments, **sent))
    assert again.get("resultType") == "input_required", f"ran twice from one approval: {again}"
    assert stack.ids["wipe"] not in tenants, tenants


def test_execute_on_lambda_finds_nothing_of_the_runtime_or_an_earlier_run(stack: Stack) -> None:
    """The hostile tools' snoop as execute's code, in its code tenant: every process's
    environ, cmdline and memory and every file under /tmp; neither the functions' secret
    nor what an earlier execute run left in /tmp (the same environment) is found."""
    other = "other-run-" + secrets.token_hex(12)
    plant = f"open('/tmp/planted.txt', 'w').write({other!r})\nprint('planted')\n"
    planted, _ = served(stack, call_event("coder", "execute", {"code": plant}))
    assert text(planted).strip() == "planted", planted
    own = "snoop-own-" + secrets.token_hex(12)
    arguments = {"needles": [stack.runtime_secret, other, own], "wait_for_victim": False,
                 "work_root": "/tmp"}  # fmt: skip
    code = with_stdin(SNOOP, arguments, SHARED_DIR="/nonexistent", SNOOP_OWN=own)
    result, tenants = served(stack, call_event("coder", "execute", {"code": code}))
    try:
        snoop = json.loads(text(result))
    except ValueError:
        raise AssertionError(f"the snoop printed no report: {result}") from None
    assert snoop["found"] == [own], snoop
    assert snoop["opened"].get("cmdline", 0) >= 1, snoop
    (tenant,) = tenants
    assert tenant.startswith("code-"), tenants


def test_on_2025_an_inner_call_needing_approval_is_refused_to_the_script(stack: Stack) -> None:
    """Lambda cannot hold a 2025 request open for the answer: the inner call is not run, and
    its answer (to the script, which goes on) says why and which revision works."""
    arguments = {"calls": [{"name": "wipe", "arguments": {"target": "db"}}]}
    event = call_event("careful", "convert", arguments)
    message = json.loads(event["body"])
    del message["params"]["_meta"]
    event["body"] = json.dumps(message)
    for header in ("mcp-method", "mcp-name"):
        event["headers"].pop(header)
    event["headers"]["mcp-protocol-version"] = "2025-11-25"
    result, tenants = served(stack, event)
    (answer,) = json.loads(text(result))["got"]
    assert answer["isError"] is True, answer
    said = text(answer)
    assert said.startswith("Tool 'wipe' was not run: view 'careful' requires the user's approval")
    assert "use 2026-07-28" in said, said
    assert stack.ids["wipe"] not in tenants, tenants


@pytest.mark.parametrize("script", ["daemon", "fork bomb"])
def test_nothing_an_execute_started_outlives_it_on_lambda(stack: Stack, script: str) -> None:
    """A double-forked daemon, a fork bomb (63 sleepers under RLIMIT_NPROC, one uid): after
    the call, the code tenant's environment holds the runtime and the runner's helper only."""
    marker = f"700.{secrets.randbelow(10**6):06d}"
    code = (DAEMON if script == "daemon" else FORK_BOMB).replace("MARKER", marker)
    result, tenants = served(stack, call_event("coder", "execute", {"code": code}))
    said = text(result)
    if script == "daemon":
        assert said.strip() == "daemon started", f"{result}\n--- mcp log:\n{stack.mcp.log()}"
    else:
        assert said.startswith("fork refused after"), f"{result}\n--- mcp log:\n{stack.mcp.log()}"
        assert "BlockingIOError" in said, said
    (tenant,) = tenants
    runtime_and_helper_only(stack.runners.environments[tenant])


def test_answers_past_one_invocations_payload_end_the_call_saying_so(stack: Stack) -> None:
    """Every answer so far travels with each run of the outer tool: seven answers of nearly
    1 MiB do not fit in Lambda's 6 MB invoke, and the call says that its answers did not fit
    (it said "bytes of code, files and arguments": its arguments are 300 bytes)."""
    calls = [{"name": "big", "arguments": {"n": 1_000_000}}] * 7
    result, tenants = served(stack, call_event("team", "convert", {"calls": calls}))
    assert result["isError"] is True, result
    said = text(result)
    found = re.search(
        r"\[runner error\] the run does not fit in one invocation of the runner function "
        r"\((\d+) bytes of code, files, arguments and answers so far, (\d+) of them the "
        r"answers to its questions and calls; Lambda takes 6291456\)",
        said,
    )
    assert found, said
    assert int(found[2]) > 6_000_000, said
    assert int(found[1]) - int(found[2]) < 10_000, said
    assert tenants.count(stack.ids["big"]) == 7, tenants


SECONDS = 6.0


@pytest.fixture(scope="module")
def bounded(stack: Stack, moto_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Another `mcp` function on the same catalog, its calls' tree bounded to a few seconds
    and 3 inner calls."""
    tmp = tmp_path_factory.mktemp("bounded")
    tmp.chmod(0o755)
    table = bucket = stack.table
    with lambda_stack(
        tmp, moto_endpoint, table, bucket,
        mcp_env={"KILN_CALL_SECONDS": str(SECONDS), "KILN_CALL_COUNT": "3"},
    ) as (mcp, runners):  # fmt: skip
        yield Stack(mcp, runners, stack.ids, "", table)


def test_a_call_whose_inner_calls_spent_the_time_bound_ends_saying_so_on_lambda(
    bounded: Stack,
) -> None:
    """The inner call sleeps far past KILN_CALL_SECONDS: it is stopped at the bound (less the
    invoke's and the runner's margins), and the call ends naming the bound, not with a run
    that could not start ("no time was left in the invocation")."""
    calls = [{"name": "slow", "arguments": {}}, {"name": "fx_rate", "arguments": {"from": "GBP"}}]
    result, tenants = served(bounded, call_event("team", "convert", {"calls": calls}))
    assert result["isError"] is True, result
    assert text(result) == (
        "Tool 'convert' was not run again with its calls' answers: the inner calls of one call "
        f"may take at most {SECONDS:g} s (or the time the request has left), and that is spent "
        "(convert)"
    ), text(result)
    assert tenants == [bounded.ids["convert"], bounded.ids["slow"]], tenants


def test_the_fourth_and_fifth_of_five_calls_are_refused_at_the_count_bound_on_lambda(
    bounded: Stack,
) -> None:
    calls = [{"name": "fx_rate", "arguments": {"from": "GBP"}}] * 5
    result, tenants = served(bounded, call_event("team", "convert", {"calls": calls}))
    answers = json.loads(text(result))["got"]
    assert [a["isError"] for a in answers] == [False, False, False, True, True], answers
    for refused in answers[3:]:
        assert text(refused) == (
            "The call of 'fx_rate' was not made: one call may make at most 3 inner calls, "
            "and this one's have all been made (convert → fx_rate)"
        )
    assert tenants.count(bounded.ids["fx_rate"]) == 3, tenants


def test_inner_calls_count_against_the_views_quota_on_lambda(stack: Stack) -> None:
    """3 calls a minute: one direct call, then a tool whose two inner calls are the 3rd and
    4th: the 4th is refused and never invoked; then a direct call is refused."""
    direct, _ = served(stack, call_event("metered", "fx_rate", {"from": "GBP"}))
    assert direct.get("isError") is not True, direct
    calls = [{"name": "fx_rate", "arguments": {"from": f}} for f in ("GBP", "EUR")]
    result, tenants = served(stack, call_event("metered", "convert", {"calls": calls}))
    first, second = json.loads(text(result))["got"]
    assert first["isError"] is False, first
    assert second["isError"] is True, second
    assert text(second).startswith("The call of 'fx_rate' was refused: "), second
    assert "3 calls per minute" in text(second), second
    assert tenants.count(stack.ids["fx_rate"]) == 1, tenants
    answer = stack.mcp.invoke(call_event("metered", "fx_rate", {"from": "EUR"}), timeout_s=60)
    assert answer.payload["statusCode"] == 429, answer.payload
