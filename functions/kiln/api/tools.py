"""REST: /api/tools. Every handler authenticates, then calls the authoring service.

Listing needs a call key (or none, when /mcp is anonymous); everything that shows source
or writes needs an author key. Refusals are domain errors, answered by `kiln.api.errors`.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from kiln.api import keyed_runs, tasks
from kiln.api.common import blocking, if_match, json_body, kiln_of, require, tagged, time_left_s
from kiln.api.errors import ApiError
from kiln.api.sight import sight
from kiln.authoring.serialise import revision_json, tool_json
from kiln.authoring.service import TestRun
from kiln.catalog.errors import RevisionRequiredError
from kiln.catalog.model import Tool
from kiln.protocol.calling import ToolCaller
from kiln.protocol.wire import LATEST_LEGACY
from kiln.serving.resolved import tool_view

router = APIRouter(prefix="/api/tools", tags=["tools"])
log = logging.getLogger("kiln.api.tools")


def _located(response: JSONResponse, name: str) -> JSONResponse:
    response.headers["Location"] = f"/api/tools/{name}"
    return response


@router.get("")
async def list_tools(request: Request, include_deleted: bool = False) -> dict[str, Any]:
    who = await require(request, "author" if include_deleted else "call")
    kiln = kiln_of(request)
    tools = await blocking(kiln.authoring.list_tools, include_deleted=include_deleted)
    seen = await sight(request, who)  # bound to a view: its tools, as MCP serves them
    listed = await blocking(kiln.snapshots.packaged, seen.listed(tools))
    return {"tools": [tool_json(t) for t in listed]}


@router.post("", status_code=201)
async def create_tool(request: Request) -> JSONResponse:
    who = await require(request)
    payload = await json_body(request)
    tool = await blocking(kiln_of(request).authoring.create, payload, who)
    return _located(tagged(tool_json(tool), tool, 201), tool.name)


@router.get("/{ref}")
async def get_tool(ref: str, request: Request) -> JSONResponse:
    who = await require(request)
    kiln = kiln_of(request)
    seen = await sight(request, who)
    found = await blocking(kiln.authoring.read, ref)
    tool = seen.served(found.tool, ref)
    if tool.head.number != found.tool.head.number:  # a pin: its revision's source
        found = await blocking(kiln.authoring.read_served, tool)
    (tool,) = await blocking(kiln.snapshots.packaged, [tool])  # its fingerprint as served
    body = tool_json(tool, code=found.code, files=found.files)
    body["bundle"] = await blocking(kiln.bundles.summary, tool.head.bundle_id)
    return tagged(body, tool)


@router.put("/{ref}")
async def replace_tool(ref: str, request: Request) -> JSONResponse:
    who = await require(request)
    expected = if_match(request)
    if expected is None:  # before the body is read: its problems are not the first to fix
        raise RevisionRequiredError(
            "If-Match: required; send the revision you read (its ETag) so that a change "
            "made in the meantime is not overwritten"
        )
    payload = await json_body(request)
    update = functools.partial(kiln_of(request).authoring.update, expected_revision=expected)
    tool = await blocking(update, ref, payload, who)
    return tagged(tool_json(tool), tool)


@router.get("/{ref}/revisions")
async def list_revisions(ref: str, request: Request) -> dict[str, Any]:
    who = await require(request)
    kiln = kiln_of(request)
    seen = await sight(request, who)
    if seen.bound:  # the one revision its view serves
        served = seen.served(await blocking(kiln.authoring.get, ref), ref)
        return {"revisions": [revision_json(served.head, name=served.name)]}
    tool = await blocking(kiln.authoring.get, ref)
    revisions = await blocking(kiln.authoring.revisions, f"id:{tool.id}")
    return {"revisions": [revision_json(r, name=tool.name) for r in revisions]}


@router.get("/{ref}/revisions/{number}")
async def get_revision(ref: str, number: int, request: Request) -> dict[str, Any]:
    who = await require(request)
    kiln = kiln_of(request)
    seen = await sight(request, who)
    if seen.bound:
        seen.revision(await blocking(kiln.authoring.get, ref), ref, number)
    tool = await blocking(kiln.authoring.get, ref)
    revision, code = await blocking(kiln.authoring.revision, f"id:{tool.id}", number)
    return revision_json(revision, code=code, name=tool.name)


@router.post("/{ref}/revisions/{number}/restore")
async def restore_revision(
    ref: str, number: int, request: Request, breaking: bool = False
) -> JSONResponse:
    who = await require(request)
    expected = if_match(request)
    restore = functools.partial(
        kiln_of(request).authoring.restore, expected_revision=expected, breaking=breaking
    )
    tool = await blocking(restore, ref, number, who)
    return tagged(tool_json(tool), tool)


async def _switch(ref: str, request: Request, enabled: bool) -> JSONResponse:
    who = await require(request)
    tool = await blocking(kiln_of(request).authoring.set_enabled, ref, enabled, who)
    return tagged(tool_json(tool), tool)


@router.post("/{ref}/enable")
async def enable_tool(ref: str, request: Request) -> JSONResponse:
    return await _switch(ref, request, True)


@router.post("/{ref}/disable")
async def disable_tool(ref: str, request: Request) -> JSONResponse:
    return await _switch(ref, request, False)


@router.post("/{ref}/rename")
async def rename_tool(ref: str, request: Request) -> JSONResponse:
    who = await require(request)
    payload = await json_body(request)
    new_name = payload.get("name") if isinstance(payload, dict) else None
    if not isinstance(new_name, str):
        raise ApiError(422, "invalid_tool", 'name: required; send {"name": "<new name>"}')
    kiln = kiln_of(request)

    def rename() -> tuple[Tool, list[str]]:
        """The rename, then the views naming the tool carried along (`views` in the answer)."""
        old = kiln.store.get(ref).name
        tool = kiln.authoring.rename(ref, new_name, who)
        return tool, list(kiln.views.store.carry_rename(tool.id, old, tool.name))

    tool, carried = await blocking(rename)
    return _located(tagged({**tool_json(tool), "views": carried}, tool), tool.name)


@router.delete("/{ref}")
async def delete_tool(ref: str, request: Request) -> JSONResponse:
    who = await require(request)
    tool = await blocking(kiln_of(request).authoring.delete, ref, who)
    return JSONResponse(tool_json(tool))


@router.post("/{ref}/undelete")
async def undelete_tool(ref: str, request: Request) -> JSONResponse:
    """A deleted tool (`id:<id>`) back under its name, while no live tool has taken it."""
    who = await require(request)
    tool = await blocking(kiln_of(request).authoring.undelete, ref, who)
    return _located(tagged(tool_json(tool), tool), tool.name)


@router.post("/{ref}/run", response_model=None)
async def run_tool(ref: str, request: Request) -> dict[str, Any] | Response:
    """Run a tool as an author test run: stdout, stderr, exit and timing, separately.

    With `"task": true` the run is a task instead (see `kiln.api.tasks`): 202, then poll.
    With `Accept: text/event-stream` (and not JSON) the answer is an event stream:
    `{"talk": line}` for each progress or log line as the script writes it, then `{"reply":
    <the JSON answer>}` (or `{"error": {"message"}}`); refusals before the run starts are
    answered as usual.
    """
    who = await require(request)
    payload = await json_body(request)
    arguments = payload.get("arguments", {}) if isinstance(payload, dict) else None
    kiln = kiln_of(request)
    tool = (await sight(request, who)).served(await blocking(kiln.authoring.get, ref), ref)
    if isinstance(payload, dict) and payload.get("task") is True:
        return await tasks.start(request, tool, arguments, who)
    answers = payload.get("answers") if isinstance(payload, dict) else None
    if answers is not None and not (
        isinstance(answers, dict) and all(isinstance(a, dict) for a in answers.values())
    ):
        raise ApiError(
            422, "invalid_answers", "answers: must be an object of question key -> answer object"
        )
    started: Callable[..., Awaitable[TestRun]] = functools.partial(
        kiln.authoring.test_run, tool, arguments, time_left_s=time_left_s(request), answers=answers
    )
    once = keyed_runs.once_for(request, who, tool, arguments)  # an Idempotency-Key header
    if once is not None:
        await blocking(kiln.authoring.check_arguments, tool, arguments)  # refused, not kept
        first = await keyed_runs.first_answer(once, tool)
        if first is not None:
            return first
        started = keyed_runs.kept(once, started, functools.partial(_reply, kiln, tool))
    if _wants_stream(request.headers.get("accept", "")):
        await blocking(kiln.authoring.check_arguments, tool, arguments)  # refused as usual
        return StreamingResponse(
            _streamed(started, functools.partial(_reply, kiln, tool)),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )
    return _reply(kiln, tool, await started())


def _wants_stream(accept: str) -> bool:
    """Only a client that asks for the stream alone gets it (one that also takes JSON, as MCP
    clients' `application/json, text/event-stream` does, keeps the JSON answer)."""
    return "text/event-stream" in accept and "application/json" not in accept


def _reply(kiln: Any, tool: Tool, run: TestRun) -> dict[str, Any]:
    shaped = ToolCaller(kiln.backend).shape(tool_view(tool), run.outcome, LATEST_LEGACY)
    return {**run.to_json(), "mcp_result": shaped}  # the CallToolResult an MCP client gets


async def _streamed(
    started: Callable[..., Awaitable[TestRun]], reply: Callable[[TestRun], dict[str, Any]]
) -> AsyncIterator[str]:
    """A test run's talk as it comes, then its answer; the run stops if the author leaves."""
    lines: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    run = asyncio.ensure_future(started(hear=lines.put_nowait))
    try:
        while not (run.done() and lines.empty()):
            getting = asyncio.ensure_future(lines.get())
            await asyncio.wait({getting, run}, return_when=asyncio.FIRST_COMPLETED)
            if not getting.done():
                getting.cancel()
                continue
            yield _event({"talk": getting.result()})
        try:
            yield _event({"reply": reply(run.result())})
        except Exception as error:
            log.exception("a streamed test run failed")
            yield _event({"error": {"message": f"The run could not finish: {error}"}})
    finally:
        run.cancel()


def _event(body: Any) -> str:
    return f"data: {json.dumps(body, ensure_ascii=False, separators=(',', ':'))}\n\n"
