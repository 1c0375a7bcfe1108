"""tools/call: find the tool, check its arguments, run it, shape what it printed into a result.

Protocol problems (no such tool, malformed params) are JSON-RPC errors; everything about the
tool itself (arguments that break its schema, a failed run, output that breaks its
outputSchema) is an `isError` result whose text says exactly what to fix.

What a result carries, for a successful run:
- the script contract's text (`ToolOutcome.text`) as one text block; or
- the blocks of a `kiln/content` object the tool printed (see `content.py`); and
- `structuredContent` when the tool declares an `output_schema` and the client's revision
  knows structured results (2025-06-18 on): stdout parsed as JSON and validated against it.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import TYPE_CHECKING, Any

from kiln.protocol.backend import CallContext, ToolBackend, ToolOutcome, ToolView
from kiln.protocol.content import (
    ContentShapeError,
    claims_shape,
    for_version,
    parse_shape,
)
from kiln.protocol.errors import (
    InternalError,
    InvalidParamsError,
    ProtocolError,
    RequestId,
    clip,
)
from kiln.protocol.inner import calls_in
from kiln.protocol.jsontext import load_json, lone_surrogate_path, may_hold_surrogates
from kiln.protocol.pinning import check_pinned
from kiln.protocol.wire import MODERN_VERSIONS, at_least, structured_allowed

if TYPE_CHECKING:
    from kiln.schema.arguments import ValidatorCache

# `mcp-types` and the schema machinery (jsonschema, referencing, re2) are imported by the
# functions that need them: a cold start that only lists tools never loads them.

log = logging.getLogger(__name__)

_JSON_TYPE = {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, int | float) and not isinstance(value, bool):
        return "a number"
    return _JSON_TYPE.get(type(value), "something else")


def text_block(text: str) -> dict[str, Any]:
    from mcp_types import TextContent

    return TextContent(text=text).model_dump(by_alias=True, exclude_none=True)


def result(
    blocks: list[dict[str, Any]], *, is_error: bool, structured: Any = None
) -> dict[str, Any]:
    """A CallToolResult built through the official model."""
    from mcp_types import CallToolResult

    data: dict[str, Any] = {"content": blocks, "isError": is_error}
    if structured is not None:
        data["structuredContent"] = structured
    return CallToolResult.model_validate(data).model_dump(
        by_alias=True, exclude_none=True, mode="json"
    )


def unknown_tool(name: str, request_id: RequestId) -> InvalidParamsError:
    """What a call (or a search-mode lookup) naming a tool the caller may not see gets."""
    return InvalidParamsError(f"Unknown tool: {clip(name)}", request_id=request_id)


def tool_error(*lines: str) -> dict[str, Any]:
    return result([text_block(line) for line in lines if line], is_error=True)


class ToolCaller:
    def __init__(
        self,
        backend: ToolBackend,
        validators: ValidatorCache | None = None,
        *,
        budget_s: float | None = 1.0,
    ) -> None:
        self._backend = backend
        self._given_validators = validators
        self._budget_s = budget_s

    @functools.cached_property
    def _validators(self) -> ValidatorCache:
        from kiln.schema.arguments import ValidatorCache

        return self._given_validators or ValidatorCache()

    async def call(
        self, params: dict[str, Any], *, version: str, ctx: CallContext, request_id: RequestId
    ) -> dict[str, Any]:
        prepared = await self.prepare(params, ctx=ctx, request_id=request_id)
        if isinstance(prepared, dict):
            return prepared
        tool, arguments = prepared
        return await self.run(tool, arguments, version=version, ctx=ctx, request_id=request_id)

    async def find(
        self, params: dict[str, Any], *, ctx: CallContext, request_id: RequestId
    ) -> ToolView:
        """The tool `params.name` names; -32602 when there is none."""
        name = params.get("name")
        if not isinstance(name, str):
            raise InvalidParamsError(
                "Invalid params: tools/call needs params.name as a string", request_id=request_id
            )
        try:
            tool = await self._backend.get_tool(name, ctx)
        except ProtocolError as error:  # a refusal the backend decided (quota, catalog)
            error.request_id = request_id
            raise
        except Exception as exc:
            log.exception("backend.get_tool failed for %s", name)
            raise InternalError("Internal error", request_id=request_id) from exc
        if tool is None:
            raise unknown_tool(name, request_id)
        try:
            check_pinned(params, tool, request_id)
        except InvalidParamsError:
            await self._refused(tool, params.get("arguments", {}), ctx)
            raise
        return tool

    async def prepare(
        self, params: dict[str, Any], *, ctx: CallContext, request_id: RequestId
    ) -> tuple[ToolView, dict[str, Any]] | dict[str, Any]:
        """The tool and its checked arguments, or the isError result that says what is wrong."""
        tool = await self.find(params, ctx=ctx, request_id=request_id)
        return await self.check_arguments(tool, params.get("arguments", {}), ctx=ctx)

    async def _refused(self, tool: ToolView, arguments: Any, ctx: CallContext) -> None:
        """A backend that keeps a call ledger is told of a call refused before it ran."""
        record = getattr(self._backend, "record_rejected", None)
        if record is None:
            return
        try:
            await record(tool, arguments, ctx)
        except Exception:
            log.exception("could not record a rejected call of %s", tool.name)

    async def check_arguments(
        self, tool: ToolView, arguments: Any, *, ctx: CallContext | None = None
    ) -> tuple[ToolView, dict[str, Any]] | dict[str, Any]:
        """The checked arguments, or the isError result saying what is wrong with them; with
        `ctx`, a backend that keeps a call ledger is told of the refused call."""
        checked = await self._check(tool, arguments)
        if isinstance(checked, dict) and ctx is not None:
            await self._refused(tool, arguments, ctx)
        return checked

    async def _check(
        self, tool: ToolView, arguments: Any
    ) -> tuple[ToolView, dict[str, Any]] | dict[str, Any]:
        from kiln.schema.arguments import SchemaProblem, TooCostlyError, summarize

        name = tool.name
        if not isinstance(arguments, dict):
            return tool_error(
                f"Invalid arguments for tool '{name}':\n"
                f"- arguments: must be an object, got {_kind(arguments)}"
            )
        try:
            problems = await self._validators.check(
                tool.input_schema, arguments, budget_s=self._budget_s
            )
        except TooCostlyError as exc:
            return tool_error(
                f"Tool '{name}' was not run: {exc} (inputSchema). Send smaller arguments, "
                "or its author can simplify the schema."
            )
        except SchemaProblem as exc:
            return tool_error(
                f"Tool '{name}' cannot run: {exc} (inputSchema). Its author must fix the tool."
            )
        if problems:
            return tool_error(summarize(name, problems))
        return tool, arguments

    async def outcome(
        self, tool: ToolView, arguments: dict[str, Any], ctx: CallContext
    ) -> ToolOutcome:
        """The backend's run of a checked call, as it is (no shaping, no conversation)."""
        return await self._backend.call_tool(tool, arguments, ctx)

    async def run(
        self,
        tool: ToolView,
        arguments: dict[str, Any],
        *,
        version: str,
        ctx: CallContext,
        request_id: RequestId,
    ) -> dict[str, Any]:
        turn = ctx.turn
        once = ctx.once if ctx.link is None or ctx.link.parent is None else None  # not inner
        if once is not None:  # a keyed call: claimed just before it runs (idempotency.py)
            await once.claim(tool)
        try:
            if turn is None:
                outcome = await self._backend.call_tool(tool, arguments, ctx)
            else:
                said = await turn.converse(
                    lambda c: self._backend.call_tool(tool, arguments, c),
                    tool, arguments, ctx, request_id,
                )  # fmt: skip
                if isinstance(said, dict):
                    return said
                assert isinstance(said, ToolOutcome)  # only tasks may go on (can_task)
                outcome = said
            if once is not None:
                once.ran = not outcome.not_ready  # a tool not ready to start did not run
        except ProtocolError as error:  # a refusal the backend decided (a spent quota)
            error.request_id = request_id
            raise
        except Exception as exc:
            log.exception("backend.call_tool failed for %s", tool.name)
            raise InternalError("Internal error", request_id=request_id) from exc
        try:
            if tool.output_schema is None:
                shaped = self.shape(tool, outcome, version)
            else:
                # Output validation can cost as much as input validation: off the event loop.
                shaped = await asyncio.to_thread(self.shape, tool, outcome, version)
        except RunFailedError as error:
            error.request_id = request_id
            await self._close(tool, True, ctx, request_id)
            raise
        is_error = bool(shaped.get("isError"))
        await self._close(tool, is_error, ctx, request_id)
        if ctx.seen is not None:  # the edge logs and counts it (observability)
            timed_out = is_error and outcome.timed_out
            ctx.seen.outcome = "timeout" if timed_out else "error" if is_error else "ok"
        return shaped

    async def _close(
        self, tool: ToolView, is_error: bool, ctx: CallContext, request_id: RequestId
    ) -> None:
        """Tell the backend how the call ended for its caller (its ledger entry). A refusal
        it decides (an entry the store would not take) becomes the call's answer."""
        close = getattr(self._backend, "close_call", None)
        if close is None:
            return
        try:
            await close(tool, is_error, ctx)
        except ProtocolError as error:
            error.request_id = request_id
            raise
        except Exception:
            log.exception("could not close the account of a call of %s", tool.name)

    def shape(self, tool: ToolView, outcome: ToolOutcome, version: str) -> dict[str, Any]:
        """The CallToolResult for what the run produced, as `version` can receive it."""
        if outcome.is_error:
            return result([text_block(outcome.text)], is_error=True)
        if calls_in(outcome.questions):  # only a tools/call makes calls (inner.py)
            return tool_error(
                f"Tool '{tool.name}' calls other tools, and this kind of run cannot make calls "
                "(a task's run, an author's test run); call it with tools/call."
            )
        if outcome.questions:  # asked where no conversation is carried (a task, a REST run)
            keys = ", ".join(q.key for q in outcome.questions)
            return tool_error(
                f"Tool '{tool.name}' asked the client ({keys}), and this kind of call carries "
                "no questions; call it with tools/call over MCP 2026-07-28."
            )
        parsed = _try_json(outcome.stdout)
        if isinstance(parsed, dict) and ERROR_MARKER in parsed:
            raise _run_failure(tool, parsed)
        where = lone_surrogate_path(parsed) if may_hold_surrogates(outcome.stdout) else None
        if where is not None:
            return tool_error(
                f"Tool '{tool.name}' printed JSON whose {where} holds a \\u escape for a lone "
                "UTF-16 surrogate, which is not valid Unicode; it must print the character "
                "itself or a valid surrogate pair."
            )
        if claims_shape(parsed):
            return self._content_result(tool, outcome, parsed, version)
        if not structured_allowed(version, tool):
            return result([text_block(outcome.text)], is_error=False)
        if parsed is _NOT_JSON:
            return tool_error(
                f"Tool '{tool.name}' declares an outputSchema, but its stdout is not a JSON "
                "value, so it cannot become structuredContent. Its output was:",
                outcome.text,
            )
        problem = self._output_problem(tool, parsed, version)
        if problem:
            return tool_error(problem, outcome.text)
        return result([text_block(outcome.text)], is_error=False, structured=parsed)

    def _output_problem(self, tool: ToolView, value: Any, version: str) -> str | None:
        from kiln.schema.arguments import SchemaProblem, TooCostlyError

        assert tool.output_schema is not None
        if version not in MODERN_VERSIONS and not isinstance(value, dict):
            return (
                f"Tool '{tool.name}' printed {_kind(value)}, but structuredContent must be "
                f"a JSON object in MCP {version}. Its output was:"
            )
        try:
            problems = self._validators.problems(tool.output_schema, value, budget_s=self._budget_s)
        except TooCostlyError as exc:
            return f"Tool '{tool.name}' printed output that could not be checked: {exc}."
        except SchemaProblem as exc:
            return f"Tool '{tool.name}' has an unusable outputSchema: {exc}. Its output was:"
        if problems:
            lines = "\n".join(f"- {p}" for p in problems)
            return (
                f"Tool '{tool.name}' printed output that does not match its outputSchema:\n"
                f"{lines}\nIts output was:"
            )
        return None

    def _content_result(
        self, tool: ToolView, outcome: ToolOutcome, parsed: dict[str, Any], version: str
    ) -> dict[str, Any]:
        try:
            reply = parse_shape(parsed)
        except ContentShapeError as exc:
            return tool_error(
                f"Tool '{tool.name}' printed a 'kiln/content' object that is not valid:\n{exc}"
            )
        blocks = for_version(reply.blocks, version)
        notes = _notes_after_stdout(outcome)
        if notes:
            blocks.append(text_block(notes))
        structured = None
        if at_least(version, "2025-06-18") and not reply.is_error:
            if tool.output_schema is not None and structured_allowed(version, tool):
                if not reply.has_structured:
                    return tool_error(
                        f"Tool '{tool.name}' declares an outputSchema, but its 'kiln/content' "
                        "object has no structuredContent."
                    )
                problem = self._output_problem(tool, reply.structured, version)
                if problem:
                    return tool_error(problem.removesuffix(" Its output was:"))
                structured = reply.structured
            elif reply.has_structured and (
                version in MODERN_VERSIONS or isinstance(reply.structured, dict)
            ):
                structured = reply.structured
        return result(blocks, is_error=reply.is_error, structured=structured)


_NOT_JSON: Any = object()


# A tool that must end its call in a JSON-RPC error instead of a result (for a task: `failed`
# with that error) prints exactly {"kiln/error": {"message": "...", "data": <optional>}}.
ERROR_MARKER = "kiln/error"


class RunFailedError(InternalError):
    """The run ended in a protocol-level failure: there is no CallToolResult for it."""


def _run_failure(tool: ToolView, parsed: dict[str, Any]) -> RunFailedError:
    body = parsed[ERROR_MARKER]
    if set(parsed) != {ERROR_MARKER} or not isinstance(body, dict):
        return RunFailedError(
            f"Tool '{tool.name}' printed a '{ERROR_MARKER}' object that is not valid: it must "
            f"be the only key, holding an object with a string 'message'"
        )
    message = body.get("message")
    if not isinstance(message, str) or set(body) - {"message", "data"}:
        return RunFailedError(
            f"Tool '{tool.name}' printed a '{ERROR_MARKER}' object that is not valid: "
            "it holds a string 'message' and optionally 'data', nothing else"
        )
    return RunFailedError(f"Tool '{tool.name}' failed: {message}", data=body.get("data"))


def _try_json(stdout: str) -> Any:
    text = stdout.strip()
    if not text:
        return _NOT_JSON
    try:
        return load_json(text)
    except ValueError:
        return _NOT_JSON


def _notes_after_stdout(outcome: ToolOutcome) -> str:
    """What the contract text adds after stdout (`[stderr] …`), so it is not lost."""
    if outcome.stdout and outcome.text.startswith(outcome.stdout):
        return outcome.text[len(outcome.stdout) :].strip()
    return ""
