"""The runner payload and the remote-runner client: what is sent, what comes back, and how
a failed or slow invoke becomes a run that did not start. The Lambda client is a stand-in
(AWS's side); the real invoke path runs in tests/e2e/test_lambda_profile.py."""

from __future__ import annotations

import asyncio
import dataclasses
import io
import json
import time
from typing import Any

import pytest

from kiln.runner import RunLimits, RunRequest, RunResult
from kiln.runner.remote import (
    MAX_PAYLOAD_BYTES,
    MAX_TALK_LINES,
    ROUND_TRIP_MARGIN_S,
    PayloadError,
    RemoteRunner,
    decode,
    encode,
    left_out_note,
    result_from,
    result_json,
    talk_json,
)
from kiln.runner.talk import Ask, Log, Progress, Said

REQUEST = RunRequest(
    language="python",
    code="print('hi')",
    arguments={"a": [1, 2]},
    timeout_s=7.0,
    time_left_s=20.0,
    extra_env={"TOKEN": "tool-secret"},
    label="t@3",
    files={"data/x.bin": b"\x00\x01"},
    calls=("fx_rate",),
    limits=RunLimits(memory_bytes=1 << 28),
    answers={"account": {"action": "accept", "content": {"account": "ops"}}},
    can_ask=("elicitation", "sampling"),
)
RESULT = RunResult(stdout="hi\n", stderr="", exit_code=0, timed_out=False, applied_timeout_s=7.0,
                   duration_s=0.1, isolation="shared", mark="none")  # fmt: skip


def test_the_payload_holds_the_run_and_nothing_else() -> None:
    payload = encode(REQUEST, tenant="tool-1", tool_id="tool-1", bundle=None)
    assert set(payload) == {"kiln_run", "tenant", "tool", "label", "language", "code", "files",
                            "arguments", "timeout_s", "time_left_s", "settings", "limits",
                            "bundle", "answers", "can_ask", "can_task", "calls"}  # fmt: skip
    request, bundle = decode(json.loads(json.dumps(payload)))
    assert request == REQUEST
    assert bundle is None


def test_a_runs_questions_come_back_across_the_runner_hop() -> None:
    """A script that asks in the runner function: its questions reach the caller's side as
    they would from a run in this process (the answers went out in the payload)."""
    asked = dataclasses.replace(RESULT, asks=(Ask("account", "elicitation", {"message": "?"}),))
    back = result_from(json.loads(json.dumps(result_json(asked))))
    assert back.asks == asked.asks
    assert back == asked


def test_a_result_is_written_with_every_field_as_asdict_writes_it() -> None:
    """`result_json` skips `dataclasses.asdict`'s deep copy (it runs on every run of the runner
    function), not a field nor a nested value: a field added to RunResult is written too."""
    question = Ask("account", "elicitation", {"message": "?", "requestedSchema": {"a": [1]}})
    full = dataclasses.replace(
        RESULT, asks=(question,), talk_problems=("line 2: not JSON",), go_on=True,
        runner_error="x", disk_quota_bytes=5, fence="landlock/7", standby=True, ready=True,
    )  # fmt: skip
    written = result_json(full)
    assert written == dataclasses.asdict(full)
    assert json.loads(json.dumps(written)) == json.loads(json.dumps(dataclasses.asdict(full)))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"kiln_run": 2}, "not a Kiln run payload"),
        ({"language": "ruby"}, "unknown language 'ruby'"),
        ({"arguments": None}, "a run payload without a usable"),
    ],
)
def test_a_payload_that_is_not_one_is_refused(change: dict[str, Any], message: str) -> None:
    payload = {**encode(REQUEST, tenant="t", tool_id="t", bundle=None), **change}
    with pytest.raises(PayloadError, match=message):
        decode(payload)


class Lambda:
    """AWS's side of Invoke: records each call, answers as told."""

    def __init__(self, answer: Any = None, *, error: str = "", delay_s: float = 0.0) -> None:
        self.calls: list[dict[str, Any]] = []
        self.answer = {"result": result_json(RESULT), "talk": []} if answer is None else answer
        self.error, self.delay_s = error, delay_s

    def invoke(self, **call: Any) -> dict[str, Any]:
        self.calls.append(call)
        time.sleep(self.delay_s)
        response: dict[str, Any] = {"Payload": io.BytesIO(json.dumps(self.answer).encode())}
        if self.error:
            response["FunctionError"] = self.error
        return response


def run(client: Lambda, request: RunRequest = REQUEST, **kwargs: Any) -> RunResult:
    runner = RemoteRunner(lambda: client, "kiln-runner", **kwargs)
    return asyncio.run(runner.run(request, tool_id="tool-1", author="ann"))


def test_each_run_is_one_synchronous_invoke_with_the_tools_tenant() -> None:
    client = Lambda()
    assert run(client) == RESULT
    (call,) = client.calls
    assert call["FunctionName"] == "kiln-runner"
    assert call["InvocationType"] == "RequestResponse"
    assert call["TenantId"] == "tool-1"
    sent = json.loads(call["Payload"])
    assert sent["time_left_s"] == pytest.approx(20.0 - ROUND_TRIP_MARGIN_S)
    assert sent["settings"] == {"TOKEN": "tool-secret"}


def test_a_runs_progress_and_logs_come_back_and_are_heard_in_order_before_it_returns() -> None:
    said: list[Said] = [Progress(1, 3, "one"), Log("info", {"k": 1}, "x"), Progress(3)]
    heard: list[Said] = []
    talk, left_out = talk_json(said)
    client = Lambda({"result": result_json(RESULT), "talk": talk})
    assert left_out == 0
    assert run(client, dataclasses.replace(REQUEST, heard=heard.append)) == RESULT
    assert heard == said


def test_a_chatty_runs_talk_is_capped_keeping_its_latest_progress_and_a_count() -> None:
    said: list[Said] = []
    for step in range(3000):
        said += [Progress(step, 3000), Log("debug", f"line {step}")]
    lines, left_out = talk_json(said)
    assert len(lines) <= MAX_TALK_LINES
    assert lines[-1] == {"progress": 2999, "total": 3000}
    assert left_out == 3000 - (MAX_TALK_LINES - 1) // 2
    # The count comes back as a number; the note is Kiln's own (its logger), made by the caller.
    heard: list[Said] = []
    client = Lambda({"result": result_json(RESULT), "talk": lines, "left_out": left_out})
    run(client, dataclasses.replace(REQUEST, heard=heard.append))
    assert heard[-1] == left_out_note(left_out)
    assert isinstance(heard[-1], Log)
    assert heard[-1].kiln
    assert str(heard[-1].data).startswith(f"{left_out} more log lines")


def test_tenant_author_puts_an_authors_tools_in_one_tenant() -> None:
    client = Lambda()
    run(client, tenant_mode="author")
    assert client.calls[0]["TenantId"] == "ann"


@pytest.mark.parametrize(
    ("client", "message"),
    [
        (Lambda({"errorMessage": "boom"}, error="Unhandled"), "the runner function failed"),
        (Lambda({"error": "this environment serves another tenant"}), "refused the run"),
        (Lambda({"what": 1}), "answer was refused (it is not what Kiln's runner sends): result"),
    ],
)
def test_a_failed_invoke_is_a_run_that_did_not_start(client: Lambda, message: str) -> None:
    result = run(client)
    assert result.started is False
    assert result.runner_error is not None
    assert message in result.runner_error


def test_a_run_too_large_for_one_invoke_is_refused_before_sending() -> None:
    client = Lambda()
    big = RunRequest(language="python", code="x", arguments={}, timeout_s=1,
                     files={"big": b"x" * MAX_PAYLOAD_BYTES})  # fmt: skip
    result = run(client, big)
    assert client.calls == []
    assert result.runner_error is not None
    assert "does not fit in one invocation" in result.runner_error


def test_the_callers_remaining_time_bounds_the_invoke() -> None:
    client = Lambda(delay_s=2.0)
    quick = RunRequest(language="python", code="x", arguments={}, timeout_s=30, time_left_s=0.3)
    runner = RemoteRunner(lambda: client, "kiln-runner")

    async def timed() -> tuple[float, RunResult]:
        started = time.monotonic()
        result = await runner.run(quick, tool_id="tool-1")
        return time.monotonic() - started, result

    waited, result = asyncio.run(timed())  # (the loop's close then waits for the thread)
    assert waited < 1.5
    assert result.runner_error == "the runner function did not answer in the time left"


def test_the_lambda_client_kiln_makes_knows_tenant_id() -> None:
    """Kiln's own botocore session (with its cut of botocore's data) serialises TenantId as
    the X-Amz-Tenant-Id header: an older botocore would refuse the parameter."""
    from kiln.aws.clients import make_clients

    session = make_clients(region="us-east-1", credentials=("testing", "testing")).session
    model = session.client("lambda").meta.service_model.operation_model("Invoke")
    member = model.input_shape.members["TenantId"]
    assert member.serialization == {"location": "header", "name": "X-Amz-Tenant-Id"}


def test_a_bundle_that_is_not_ready_stops_the_run_before_anything_is_sent() -> None:
    from kiln.bundles.cache import BundleNotReadyError

    def not_ready(bundle_id: str) -> dict[str, Any]:
        raise BundleNotReadyError("queued", bundle_id=bundle_id, status="pending")

    client = Lambda()
    runner = RemoteRunner(lambda: client, "kiln-runner", bundle_record=not_ready)
    with pytest.raises(BundleNotReadyError):
        asyncio.run(runner.run(REQUEST, tool_id="tool-1", bundle_id="b1"))
    assert client.calls == []


def test_a_bundle_rebuilt_to_other_versions_is_sent_as_rebuilt_and_never_as_the_old_build() -> None:
    records = {"b1": {"id": "b1", "status": "ready", "resolved_sha256": "sha256:one"}}
    client = Lambda()
    runner = RemoteRunner(lambda: client, "kiln-runner", bundle_record=lambda b: records[b])

    def sent(resolved: str) -> RunResult:
        return asyncio.run(runner.run(REQUEST, tool_id="tool-1", bundle_id="b1", resolved=resolved))

    assert sent("sha256:one") == RESULT
    # Rebuilt: the record this process kept is of another build, so it is read again and
    # the new build is what the runner function is told to use.
    records["b1"] = {"id": "b1", "status": "ready", "resolved_sha256": "sha256:two"}
    assert sent("sha256:two") == RESULT
    assert json.loads(client.calls[-1]["Payload"])["bundle"]["resolved_sha256"] == "sha256:two"
    # A caller told of the old build (a catalog read older than the rebuild) runs nothing.
    refused = sent("sha256:one")
    assert not refused.started, refused
    assert refused.runner_error is not None
    assert "rebuilt" in refused.runner_error, refused
    assert len(client.calls) == 2
