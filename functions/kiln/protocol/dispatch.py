"""From a JSON body to a reply: parse, batches, era, method table, error mapping.

Transport-agnostic: HTTP (`http.py`) and stdio (`stdio.py`) both call `Dispatcher.handle_body`.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from kiln.errors import KilnError
from kiln.protocol.backend import CallContext, Outcome, Served, TaskBackend, ToolBackend
from kiln.protocol.calling import ToolCaller
from kiln.protocol.classify import (
    VERSION_HEADER,
    Envelope,
    claims_modern,
    classify,
    header,
    request_id_of,
)
from kiln.protocol.cursor import CursorCodec
from kiln.protocol.discovery import Discovery
from kiln.protocol.errors import (
    InternalError,
    InvalidRequestError,
    MethodNotFoundError,
    ParseError,
    ProtocolError,
    RequestId,
    UnavailableError,
    UnsupportedVersionError,
    clip,
    error_answer,
    shown,
)
from kiln.protocol.idempotency import HEADER as IDEMPOTENCY_HEADER
from kiln.protocol.idempotency import IdempotentCalls, with_header_key
from kiln.protocol.inner import CallBudget, CallLink, InnerCalls
from kiln.protocol.jsontext import dumps, load_json, lone_surrogate_path, may_hold_surrogates
from kiln.protocol.legacy import LegacyEra, negotiate
from kiln.protocol.listing import ToolLister
from kiln.protocol.modern import ModernEra
from kiln.protocol.sealing import StateSealer
from kiln.protocol.settings import ProtocolSettings
from kiln.protocol.streaming import Outbox, PendingAnswers, accepts_events, answer, frame
from kiln.protocol.tasks import TASKS_VERSION, TaskMethods
from kiln.protocol.wire import BATCH_VERSION, LEGACY_VERSIONS, MAX_BATCH, MODERN_VERSIONS

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Reply:
    """A transport-neutral answer: `body` None means "accepted, nothing to say" (HTTP 202)."""

    status: int
    body: bytes | None
    negotiated: str | None = None  # the version a legacy `initialize` agreed on
    headers: tuple[tuple[str, str], ...] = ()  # extra HTTP headers (Retry-After)
    stream: AsyncIterator[bytes] | None = None  # Server-Sent Events, `body` unused


def _envelope(request_id: RequestId, result: bytes) -> bytes:
    # One join, one copy of `result` (a tools/list page is ~70 KB).
    return b"".join((b'{"jsonrpc":"2.0","id":', dumps(request_id), b',"result":', result, b"}"))


def error_reply(error: KilnError) -> Reply:
    status, body, headers = error_answer(error)
    return Reply(status, dumps(body), headers=tuple(headers.items()))


Handler = Callable[[Envelope, CallContext], Awaitable[bytes]]


@dataclass(frozen=True)
class _SurrogateCheck:
    """Refuses messages holding a lone UTF-16 surrogate (only walked when the body has one)."""

    suspect: bool

    def refuse(self, message: Any) -> None:
        path = lone_surrogate_path(message) if self.suspect else None
        if path is None:
            return
        rid = request_id_of(message)
        raise InvalidRequestError(
            f"Invalid Request: {path} holds a \\u escape for a lone UTF-16 surrogate, "
            "which is not valid Unicode (RFC 7493); send the character itself or a valid pair",
            request_id=None if lone_surrogate_path(rid) else rid,
            modern=claims_modern(message),
        )


class Dispatcher:
    def __init__(
        self, backend: ToolBackend, settings: ProtocolSettings, tasks: TaskBackend | None = None
    ) -> None:
        self._backend = backend
        self._legacy = LegacyEra(settings, tasks=tasks is not None)
        self._modern = ModernEra(settings, tasks=tasks is not None)
        codec = CursorCodec(settings.cursor_secret or os.urandom(32))
        self._lister = ToolLister(
            codec,
            page_size=settings.page_size,
            ttl_ms=settings.list_ttl_ms,
            tasks=tasks is not None,
        )
        self._caller = ToolCaller(backend, budget_s=settings.schema_budget_s)
        self._inner = InnerCalls(self._caller)
        self._once = IdempotentCalls(getattr(backend, "idempotency", None))
        self._call_limits = settings.call_limits
        self._discovery = Discovery(self._lister, self._caller)
        self._sealer = StateSealer(settings.state_secret or None)
        self._pending = PendingAnswers()
        self._tasks = (
            TaskMethods(tasks, self._caller, result_wait_s=settings.task_result_wait_s)
            if tasks is not None
            else None
        )
        self._legacy_methods: dict[str, Handler] = {
            "initialize": self._initialize,
            "ping": self._ping,
            "tools/list": self._tools_list,
            "tools/call": self._tools_call,
            # No session keeps a level: every log line of a call is sent on its stream.
            "logging/setLevel": self._ping,
        }
        # subscriptions/listen is declined (digest §5.9 option a): discover advertises no
        # listChanged and no subscribe, so a 404 / -32601 is the documented feature absence.
        self._modern_methods: dict[str, Handler] = {
            "server/discover": self._discover,
            "tools/list": self._tools_list,
            "tools/call": self._tools_call,
        }
        if self._tasks is not None:
            # tasks/result and tasks/list are not part of the extension: -32601 there.
            self._modern_methods.update(
                {
                    "tasks/get": self._task_method(self._tasks.get),
                    "tasks/update": self._task_method(self._tasks.update),
                    "tasks/cancel": self._task_method(self._tasks.cancel),
                }
            )
            self._legacy_methods.update(
                {
                    "tasks/get": self._task_method(self._tasks.get),
                    "tasks/result": self._task_method(self._tasks.result),
                    "tasks/list": self._task_method(self._tasks.list),
                    "tasks/cancel": self._task_method(self._tasks.cancel),
                }
            )

    def _task_method(
        self, method: Callable[[Envelope, CallContext], Awaitable[dict[str, Any]]]
    ) -> Handler:
        async def handler(envelope: Envelope, ctx: CallContext) -> bytes:
            if not envelope.modern and envelope.version != TASKS_VERSION:
                raise MethodNotFoundError(
                    f"Method not found: {envelope.method} exists only in MCP {TASKS_VERSION} "
                    "and, as the tasks extension, in 2026-07-28",
                    request_id=envelope.request_id,
                )
            return dumps(self._finish(envelope)(await method(envelope, ctx)))

        return handler

    def abandon_questions(self, reason: str) -> None:
        """The client can answer no more (stdio's input ended): its held calls end now."""
        self._pending.abandon(reason)

    async def handle_body(
        self,
        body: bytes,
        headers: Mapping[str, str],
        ctx: CallContext,
        *,
        http: bool = True,
        legacy_version: str | None = None,
    ) -> Reply:
        """Answer one POST body (or one stdio line)."""
        try:
            message = load_json(body.decode("utf-8"))
        except UnicodeDecodeError as error:
            return error_reply(
                ParseError(f"Parse error: the body is not valid UTF-8 (byte {error.start})")
            )
        except (ValueError, RecursionError):  # nested past the parser
            return error_reply(ParseError("Parse error: the body is not valid JSON"))
        checked = _SurrogateCheck(may_hold_surrogates(body))
        if isinstance(message, list):  # many methods: the edge is told none (ctx.seen)
            if header(headers, IDEMPOTENCY_HEADER) is not None:  # one key names one call
                return error_reply(
                    InvalidRequestError(
                        "Invalid Request: an Idempotency-Key header names one call, not a "
                        "batch; put each call's key in its params._meta"
                    )
                )
            return await self._batch(
                message,
                headers,
                replace(ctx, seen=None),
                http=http,
                legacy_version=legacy_version,
                checked=checked,
            )
        return await self._one(
            message, headers, ctx, http=http, legacy_version=legacy_version, checked=checked
        )

    async def _one(
        self,
        message: Any,
        headers: Mapping[str, str],
        ctx: CallContext,
        *,
        http: bool,
        legacy_version: str | None,
        checked: _SurrogateCheck,
    ) -> Reply:
        envelope: Envelope | None = None
        if self._pending.owns(message):  # a client's answer to a held call's question
            from kiln.protocol.talking import caller_of  # a call's turn: the first call loads it

            self._pending.deliver(message, caller_of(ctx))
            return Reply(202, None)
        try:
            checked.refuse(message)
            envelope = classify(message, headers, http=http, legacy_version=legacy_version)
            if envelope is None or envelope.is_notification:
                return Reply(202, None)
            _saw(ctx, envelope)
            if envelope.method == "tools/call":
                envelope = with_header_key(envelope, headers)
            table = self._modern_methods if envelope.modern else self._legacy_methods
            handler = table.get(envelope.method)
            if handler is None:
                raise MethodNotFoundError(
                    f"Method not found: {clip(envelope.method)}",
                    request_id=envelope.request_id,
                    modern=envelope.modern,
                )
            if envelope.method == "tools/call" and (
                not http or accepts_events(header(headers, "accept"))
            ):  # stdio can always say things before the result, as lines
                return await self._streamed(handler, envelope, ctx, framed=frame if http else _bare)
            result = await handler(envelope, ctx)
        except ProtocolError as error:
            _ended(ctx, "rejected")
            if envelope is not None and envelope.modern:
                error.modern = True
            return error_reply(error)
        except Exception:
            _ended(ctx, "rejected")
            log.exception("unexpected failure answering a request")
            rid = envelope.request_id if envelope else None
            modern = envelope.modern if envelope else False
            return error_reply(InternalError("Internal error", request_id=rid, modern=modern))
        negotiated = None
        if envelope.method == "initialize":
            negotiated = negotiate(str(envelope.params.get("protocolVersion")))
        return Reply(200, _envelope(envelope.request_id, result), negotiated)

    async def _streamed(
        self,
        handler: Handler,
        envelope: Envelope,
        ctx: CallContext,
        *,
        framed: Callable[[bytes], bytes],
    ) -> Reply:
        """A tools/call that may say things before its result (see streaming.py), each
        message `framed`: an SSE event over HTTP, bare for stdio."""
        outbox = Outbox()

        async def run() -> Reply:
            try:
                result = await handler(envelope, replace(ctx, outbox=outbox))
            except ProtocolError as error:
                _ended(ctx, "rejected")
                error.modern = error.modern or envelope.modern
                return error_reply(error)  # with its headers (Retry-After)
            except Exception:
                _ended(ctx, "rejected")
                log.exception("unexpected failure answering a request")
                rid, modern = envelope.request_id, envelope.modern
                return error_reply(InternalError("Internal error", request_id=rid, modern=modern))
            return Reply(200, _envelope(envelope.request_id, result))

        said = await answer(run(), outbox, lambda reply: reply.body or b"", framed)
        if isinstance(said, Reply):
            return said
        return Reply(200, None, stream=said)

    async def _batch(
        self,
        messages: list[Any],
        headers: Mapping[str, str],
        ctx: CallContext,
        *,
        http: bool,
        legacy_version: str | None,
        checked: _SurrogateCheck,
    ) -> Reply:
        version = header(headers, VERSION_HEADER) if http else legacy_version
        if version in MODERN_VERSIONS or any(claims_modern(m) for m in messages):
            return error_reply(
                InvalidRequestError(
                    "Invalid Request: 2026-07-28 does not allow JSON-RPC batches", modern=True
                )
            )
        if version is not None and version not in LEGACY_VERSIONS:
            return error_reply(
                UnsupportedVersionError(
                    f"Bad Request: unsupported MCP-Protocol-Version header {shown(version)}",
                    data={"supported": list(LEGACY_VERSIONS), "requested": version[:64]},
                )
            )
        if version is not None and version != BATCH_VERSION:
            return error_reply(
                InvalidRequestError(
                    f"Invalid Request: JSON-RPC batches exist only in {BATCH_VERSION}, "
                    f"not in {version}"
                )
            )
        if not 1 <= len(messages) <= MAX_BATCH:
            return error_reply(
                InvalidRequestError(
                    f"Invalid Request: a batch holds 1 to {MAX_BATCH} messages, "
                    f"this one holds {len(messages)}"
                )
            )
        if any(isinstance(m, dict) and m.get("method") == "initialize" for m in messages):
            return error_reply(
                InvalidRequestError("Invalid Request: initialize must not be part of a batch")
            )
        replies = await asyncio.gather(
            *(
                self._one(m, headers, ctx, http=http, legacy_version=BATCH_VERSION, checked=checked)
                for m in messages
            )
        )
        bodies = [r.body for r in replies if r.body is not None]
        if not bodies:
            return Reply(202, None)
        return Reply(200, b"[" + b",".join(bodies) + b"]")

    def _finish(self, envelope: Envelope) -> Callable[[dict[str, Any]], dict[str, Any]]:
        return self._modern.finish if envelope.modern else self._legacy.finish

    async def _initialize(self, envelope: Envelope, ctx: CallContext) -> bytes:
        return self._legacy.initialize(envelope.params, envelope.request_id)

    async def _ping(self, envelope: Envelope, ctx: CallContext) -> bytes:
        return b"{}"

    async def _discover(self, envelope: Envelope, ctx: CallContext) -> bytes:
        return self._modern.discover()

    async def _served(self, envelope: Envelope, ctx: CallContext) -> Served:
        """The tools this request may see, and whether they are listed or searched."""
        served = getattr(self._backend, "served_tools", None)
        try:
            if served is None:
                return Served(await self._backend.list_tools(ctx))
            found: Served = await served(ctx)
            return found
        except UnavailableError as exc:
            raise exc.for_request(envelope.request_id, modern=envelope.modern) from None
        except Exception as exc:
            log.exception("backend.list_tools failed")
            raise InternalError(
                "Internal error", request_id=envelope.request_id, modern=envelope.modern
            ) from exc

    async def _tools_list(self, envelope: Envelope, ctx: CallContext) -> bytes:
        served = await self._served(envelope, ctx)
        return self._lister.page(
            self._discovery.shown(served),
            envelope.params,
            version=envelope.version,
            private=ctx.principal is not None,
            finish=self._finish(envelope),
            request_id=envelope.request_id,
        )

    async def _tools_call(self, envelope: Envelope, ctx: CallContext) -> bytes:
        if self._discovery.claims(envelope.params):  # a meta-tool's name: in its mode?
            served = await self._served(envelope, ctx)
            if self._discovery.answers(envelope.params["name"], served.mode):
                return await self._discovery.answer(
                    envelope, ctx, served, self._call_tool, self._finish(envelope)
                )
        return await self._call_tool(envelope, ctx)

    async def _call_tool(self, envelope: Envelope, ctx: CallContext) -> bytes:
        """A catalog tool's tools/call (search mode's `call_tool` comes here too)."""
        from kiln.protocol.talking import caller_of, turn_for

        outbox = ctx.outbox
        holder = None
        if outbox is not None and not envelope.modern and ctx.can_hold:
            wait_s = ctx.time_left_s if ctx.time_left_s is not None else 300.0
            holder = self._pending.holder(outbox, caller_of(ctx), wait_s)
        turn = turn_for(
            envelope.params,
            modern=envelope.modern,
            sealer=self._sealer,
            rid=envelope.request_id,
            emit=outbox.emit if outbox is not None else None,
            holder=holder,
            declared=ctx.declared,
            version=envelope.version,
        )
        turn.inner = self._inner
        link = CallLink(budget=CallBudget.of(self._call_limits, ctx.time_left_s))
        ctx = replace(ctx, turn=turn, link=link)
        result = await self._once.call(envelope, ctx, lambda c: self._run_call(envelope, c))
        return dumps(self._finish(envelope)(result))

    async def _run_call(self, envelope: Envelope, ctx: CallContext) -> dict[str, Any]:
        if self._tasks is not None:
            return await self._tasks.tools_call(envelope, ctx)
        return await self._caller.call(
            envelope.params, version=envelope.version, ctx=ctx, request_id=envelope.request_id
        )


def _bare(message: bytes) -> bytes:
    """A message as stdio writes it (its line ending added there)."""
    return message


def _saw(ctx: CallContext, envelope: Envelope) -> None:
    """Tell the edge what the request is (CallContext.seen): its method, a call's tool."""
    if ctx.seen is None:
        return
    ctx.seen.method = envelope.method
    name = envelope.params.get("name") if envelope.method == "tools/call" else None
    ctx.seen.tool = name if isinstance(name, str) else None


def _ended(ctx: CallContext, outcome: Outcome) -> None:
    if ctx.seen is not None:
        ctx.seen.outcome = outcome
