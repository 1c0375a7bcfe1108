"""Send one run to the runner function (`kiln.lambda_handlers.runner`) and read its result.

The public `mcp` function, the task worker and the admin function's test runs hold callers'
requests, catalog credentials and every tool's files; tool code must not run beside them.
When `KILN_RUNNER_FUNCTION` is set, each run is sent instead to a function created with
Lambda tenant isolation, with `TenantId` = the tool's id (or its author's, with
`KILN_RUNNER_TENANT=author`), so an environment only ever holds one tenant's runs.

The payload carries only what that run needs, and nothing of the caller's request: the
language, code and files, the arguments, the tool's settings and secrets, the time it may
take, and the bundle's record (where its zip is and its digest: the runner fetches it from
S3 itself). Never a header, an API key, a session or a token. `encode`/`decode` are the one
definition of that payload, on both sides.

The answer carries the run's result and what it said on its talk channel while it ran
(progress and log lines, in order: `talk_json`), which `RemoteRunner.run` hands to the
request's `heard` before it returns, as a local run would have while it ran. The invoke is
synchronous, so they come together with the result (Lambda has no response streaming for a
Python function). Whatever process of the environment posted it, the answer is read as the
tool's own word (`kiln.runner.answer`): its shape checked strictly, its questions and lines by
the talk channel's rules, and what kept the run apart never taken from it.

A bundle that is not ready raises (BundleError, from `bundle_record`) before anything is
sent. The invoke is synchronous and bounded by the caller's remaining time; a failed invoke
is a run that did not start (`RunResult.runner_error`), never retried (a retry could run a
tool twice).
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
import threading
from collections.abc import Callable, Mapping
from typing import Any

from kiln.runner.limits import RunLimits
from kiln.runner.model import RunRequest, RunResult
from kiln.runner.talk import KILN_LOGGER, MAX_TALK_LINES, Ask, Log, Progress, Said

PAYLOAD_VERSION = 1
ROUND_TRIP_MARGIN_S = 1.0  # kept from the caller's time for the invoke and the answer
MAX_PAYLOAD_BYTES = 6 * 1024 * 1024  # Lambda's synchronous Invoke limit
# A call of a tool whose bundle was rebuilt to other versions since its caller was told of it.
REBUILT = (
    "its packages were rebuilt since this server last read the catalog, and resolved to "
    "other versions; list the tools again, check the new fingerprint and call it again"
)
RUN_FIELD_NAMES = tuple(f.name for f in dataclasses.fields(RunResult))
RUN_FIELDS = set(RUN_FIELD_NAMES)
# What of a run's talk crosses the invoke (its answer holds at most 6 MB, with the output):
# MAX_TALK_LINES (talk.py: the caller's side holds an answer to it too), and
MAX_TALK_BYTES = 1024 * 1024


class PayloadError(ValueError):
    """A runner payload that is not one this version of Kiln makes."""


def encode(
    request: RunRequest, *, tenant: str, tool_id: str, bundle: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The runner payload for one run (JSON-ready)."""
    return {
        "kiln_run": PAYLOAD_VERSION,
        "tenant": tenant,
        "tool": tool_id,
        "label": request.label,
        "language": request.language,
        "code": request.code,
        "files": {name: base64.b64encode(data).decode() for name, data in request.files.items()},
        "arguments": dict(request.arguments),
        "timeout_s": request.timeout_s,
        "time_left_s": request.time_left_s,
        "settings": dict(request.extra_env),
        "limits": None if request.limits is None else dataclasses.asdict(request.limits),
        "bundle": None if bundle is None else dict(bundle),
        # The conversation so far (runner/talk.py): the caller's answers, what it can answer.
        "answers": None if request.answers is None else dict(request.answers),
        "can_ask": list(request.can_ask),
        "can_task": request.can_task,
        "calls": list(request.calls),
    }


def too_large_for_lambda(request: RunRequest, *, tool_id: str) -> str | None:
    """Why a run that carries answers would not fit in one invocation of the runner function
    (None: it fits). Runs made here (kiln dev, kiln stdio) are held to it too, so that a tool
    whose calls' results pile up fails where it is written, not first on AWS."""
    if not request.answers:
        return None
    body = json.dumps(encode(request, tenant=tool_id, tool_id=tool_id, bundle=None)).encode()
    return _too_large(len(body), request) if len(body) > MAX_PAYLOAD_BYTES else None


def _too_large(size: int, request: RunRequest) -> str:
    """Why a run's payload was not sent: what it holds, and the answers so far, which a tool
    that asks or calls tools carries to every run (runner/TALKING.md)."""
    what = "code, files and arguments"
    if request.answers:
        answered = len(json.dumps(dict(request.answers), separators=(",", ":")).encode())
        what = (
            f"code, files, arguments and answers so far, {answered} of them the answers to "
            "its questions and calls"
        )
    return (
        f"the run does not fit in one invocation of the runner function ({size} bytes of "
        f"{what}; Lambda takes {MAX_PAYLOAD_BYTES})"
    )


def decode(payload: Mapping[str, Any]) -> tuple[RunRequest, Mapping[str, Any] | None]:
    """The run a payload asks for, and its bundle record; PayloadError when it is not one."""
    if payload.get("kiln_run") != PAYLOAD_VERSION:
        raise PayloadError(f"not a Kiln run payload of version {PAYLOAD_VERSION}")
    try:
        files = {name: base64.b64decode(data) for name, data in payload["files"].items()}
        limits = payload.get("limits")
        request = RunRequest(
            language=payload["language"],
            code=str(payload["code"]),
            arguments=dict(payload["arguments"]),
            timeout_s=float(payload["timeout_s"]),
            time_left_s=None if payload["time_left_s"] is None else float(payload["time_left_s"]),
            extra_env={str(k): str(v) for k, v in payload["settings"].items()},
            label=str(payload.get("label", "")),
            files=files,
            limits=None if limits is None else RunLimits(**limits),
            answers=None if payload.get("answers") is None else dict(payload["answers"]),
            can_ask=tuple(str(kind) for kind in payload.get("can_ask", ())),
            can_task=payload.get("can_task") is True,
            calls=tuple(str(name) for name in payload.get("calls", ())),
        )
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise PayloadError(f"a run payload without a usable {error}") from None
    if request.language not in ("python", "node"):
        raise PayloadError(f"unknown language {request.language!r}")
    return request, payload.get("bundle")


def result_json(result: RunResult) -> dict[str, Any]:
    """Every field of `result`, JSON-ready (what `dataclasses.asdict` gives, without its deep
    copy of each value: a tenth of the time, on every run of the runner function)."""
    data = {name: getattr(result, name) for name in RUN_FIELD_NAMES}
    data["asks"] = tuple(dataclasses.asdict(ask) for ask in result.asks)
    return data


def result_from(data: Mapping[str, Any]) -> RunResult:
    """The RunResult of a runner answer's `result` (tests; `RemoteRunner` reads the whole
    answer as untrusted input: `kiln.runner.answer`)."""
    fields = {k: v for k, v in data.items() if k in RUN_FIELDS}
    fields["asks"] = tuple(Ask(**ask) for ask in fields.get("asks", ()))  # the run's questions
    fields["talk_problems"] = tuple(fields.get("talk_problems", ()))
    return RunResult(**fields)


def talk_json(said: list[Said]) -> tuple[list[dict[str, Any]], int]:
    """A run's progress and log lines as talk lines (runner/talk.py), oldest first, within
    MAX_TALK_LINES and MAX_TALK_BYTES, and how many log lines were left out past them (only
    the latest progress is kept). The caller says so in Kiln's own name (`left_out_note`)."""
    lines: list[dict[str, Any]] = []
    size, dropped, last_progress = 0, 0, None
    for item in said:
        line = _talk_line(item)
        if line is None:
            continue
        cost = len(json.dumps(line, ensure_ascii=False, default=str))
        if len(lines) < MAX_TALK_LINES - 1 and size + cost <= MAX_TALK_BYTES:
            lines.append(line)
            size += cost
        elif isinstance(item, Progress):
            last_progress = line
        else:
            dropped += 1
    if last_progress is not None:
        lines.append(last_progress)
    return lines, dropped


def left_out_note(dropped: int) -> Log:
    note = f"{dropped} more log lines of this run were left out (the runner's answer is capped)"
    return Log("warning", note, KILN_LOGGER, kiln=True)


def _talk_line(said: Said) -> dict[str, Any] | None:
    if isinstance(said, Progress):
        line: dict[str, Any] = {"progress": said.progress}
        if said.total is not None:
            line["total"] = said.total
        if said.message is not None:
            line["message"] = said.message
        return line
    if isinstance(said, Log) and not said.kiln:
        line = {"log": said.level, "data": said.data}
        return line if said.logger is None else {**line, "logger": said.logger}
    return None  # questions travel in the result (RunResult.asks)


def failed_run(message: str, timeout_s: float) -> RunResult:
    return RunResult(
        stdout="",
        stderr="",
        exit_code=None,
        timed_out=False,
        applied_timeout_s=timeout_s,
        duration_s=0.0,
        started=False,
        runner_error=message,
    )


class RemoteRunner:
    """Runs each request in the runner function, one tenant per tool (or per author)."""

    def __init__(
        self,
        client: Callable[[], Any],
        function: str,
        *,
        tenant_mode: str = "tool",
        bundle_record: Callable[[str], Mapping[str, Any] | None] = lambda _: None,
    ) -> None:
        self._client = client
        self.function = function
        self.tenant_mode = tenant_mode
        self._bundle_record = bundle_record
        self._records: dict[str, Mapping[str, Any]] = {}  # ready records, by bundle id
        self._lock = threading.Lock()

    def tenant(self, tool_id: str, author: str) -> str:
        return author if self.tenant_mode == "author" and author else tool_id

    async def run(
        self,
        request: RunRequest,
        *,
        tool_id: str,
        author: str = "",
        bundle_id: str | None = None,
        resolved: str | None = None,
    ) -> RunResult:
        """`resolved`: the digest of the build the caller was told of (what the tool's served
        fingerprint names); a bundle rebuilt since to other versions is not run."""
        bundle = None
        if bundle_id is not None:
            bundle = await asyncio.to_thread(self._record, bundle_id, resolved)
            if resolved and bundle is not None and bundle.get("resolved_sha256") != resolved:
                return failed_run(REBUILT, request.timeout_s)
        left = request.time_left_s
        sent = dataclasses.replace(
            request, time_left_s=None if left is None else left - ROUND_TRIP_MARGIN_S
        )
        tenant = self.tenant(tool_id, author)
        body = json.dumps(encode(sent, tenant=tenant, tool_id=tool_id, bundle=bundle)).encode()
        if len(body) > MAX_PAYLOAD_BYTES:
            return failed_run(_too_large(len(body), request), request.timeout_s)
        invoke = asyncio.to_thread(self._invoke, tenant, body)
        try:
            answer = await (invoke if left is None else asyncio.wait_for(invoke, max(left, 0.1)))
        except TimeoutError:
            return failed_run("the runner function did not answer in the time left", left or 0.0)
        except Exception as error:  # the invoke itself failed: throttled, denied, unreachable
            return failed_run(
                f"the runner function could not be invoked ({type(error).__name__}: {error})",
                request.timeout_s,
            )
        if isinstance(answer, str):
            return failed_run(answer, request.timeout_s)
        result, said, left_out = answer
        if left_out:
            said.append(left_out_note(left_out))
        if request.heard is not None:  # as a local run says them while it runs
            for item in said:
                request.heard(item)
        return result

    def warm(self, *, tool_id: str, author: str = "", bundle_id: str | None = None) -> None:
        """Start the tool's tenant environment ahead of its first call (after a save): one
        asynchronous invoke (Lambda queues it and answers 202) of a payload that runs nothing
        (`{"kiln_warm": 1}`: the runner function's init, its helper, the bundle fetched and
        unpacked if it is ready). Raises what the invoke raises (the caller logs it)."""
        tenant = self.tenant(tool_id, author)
        bundle = None
        if bundle_id is not None:
            try:
                bundle = self._record(bundle_id)
            except Exception:  # still being built (or unreadable): its first call fetches it
                bundle = None
        body = {"kiln_warm": 1, "tenant": tenant, "bundle": bundle}
        self._client().invoke(
            FunctionName=self.function,
            InvocationType="Event",
            TenantId=tenant,
            Payload=json.dumps(body).encode(),
        )

    def _record(self, bundle_id: str, resolved: str | None = None) -> Mapping[str, Any] | None:
        with self._lock:
            known = self._records.get(bundle_id)
        if known is not None and (not resolved or known.get("resolved_sha256") == resolved):
            return known  # a ready build never changes; a rebuild is another build
        record = self._bundle_record(bundle_id)
        if record is not None and record.get("status") == "ready":
            with self._lock:
                self._records[bundle_id] = record
        return record

    def _invoke(self, tenant: str, body: bytes) -> tuple[RunResult, list[Said], int] | str:
        response = self._client().invoke(
            FunctionName=self.function,
            InvocationType="RequestResponse",
            TenantId=tenant,
            Payload=body,
        )
        # The answer is untrusted input (any process of the environment can post it): read by
        # its strict model, which the runner function itself never needs to import.
        from kiln.runner.answer import MAX_ANSWER_BYTES, read_answer

        data = response["Payload"].read(MAX_ANSWER_BYTES + 1)
        if response.get("FunctionError"):
            return f"the runner function failed: {data[:500].decode('utf-8', 'replace')}"
        return read_answer(data)
