"""Idempotent calls: a `tools/call` sent again with its key is answered, not run again.

A client names one call with a key: `params._meta["kiln/idempotency-key"]`, or for a raw HTTP
client the `Idempotency-Key` header (the IETF httpapi draft's field; a structured-field string,
so `"abc"` and `abc` are the same key). Within the store's window (24 h), the same caller, tool
and key is answered with what the first call answered, without running the tool again; the
same key with other arguments is refused (-32002, `reason: other_arguments`); a call still
running is waited for, a few seconds, then answered `in_progress` (-32002, `retryAfterSeconds`).

The key is claimed (a conditional put, `KeptCalls.claim`) just before the tool runs or its
task is created, so two calls sent together run once; the answer is kept before it is sent.
A claim holds a lease: what the request has left, plus a margin. A claim whose lease ran out
unanswered belongs to a request that died (a killed `kiln dev`, a Lambda timeout): its tool
may have run. A tool that says repeating it is harmless (`readOnlyHint` or `idempotentHint`)
is run again; any other is not, and the call is answered `outcome_unknown`: the caller checks
and sends a new key. Nothing here is the store: `kiln.accounting.idempotency` is.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal, Protocol

from kiln.protocol.classify import Envelope, header
from kiln.protocol.errors import (
    REFUSED,
    InvalidParamsError,
    ProtocolError,
    RateLimitedError,
    RequestId,
    UnavailableError,
)

if TYPE_CHECKING:
    from kiln.protocol.backend import CallContext, ToolView

log = logging.getLogger(__name__)

META_KEY = "kiln/idempotency-key"
HEADER = "idempotency-key"
MAX_KEY_CHARS = 255
_KEY = re.compile(r"[A-Za-z0-9_.:~+/=-]{1,255}")  # MAX_KEY_CHARS
KEY_RULE = (
    f"a string of 1 to {MAX_KEY_CHARS} characters, each a letter, a digit or one of "
    "- _ . : ~ + / = (a UUID fits)"
)
REPLAYED_META_KEY = "kiln/idempotent-replay"  # on a replayed result: when the call first ran
DEFAULT_LEASE_S = 900.0  # no time limit known (stdio): the longest a Lambda invocation lives
LEASE_MARGIN_S = 5.0  # past the request's time: its answer is being kept
Reason = Literal["other_arguments", "in_progress", "outcome_unknown", "result_not_kept"]


class IdempotencyConflictError(ProtocolError):
    """A key that names another call, or one whose answer cannot be given (`data.reason`)."""

    code = REFUSED


class AnsweredBefore(Exception):
    """Raised by `Once.claim` when the key's call was answered before: its result."""

    def __init__(self, result: dict[str, Any]) -> None:
        super().__init__("answered before")
        self.result = result


@dataclass(frozen=True)
class Scope:
    """Whose key: the caller (as the ledger labels them, with the view), the tool, the key."""

    caller: str
    tool: str
    key: str


class Held(Protocol):
    """What the store holds for a key: a claim (`running`) or the first answer (`done`).
    `answer`: {"result": ...} or {"error": {code, message, data}}, None when not kept (a
    claim, or an answer over the cap, whose size `answer_bytes` says)."""

    @property
    def state(self) -> Literal["running", "done"]: ...
    @property
    def digest(self) -> str: ...
    @property
    def started_at(self) -> str: ...  # ISO 8601 UTC: when the key was first claimed
    @property
    def lease_until(self) -> float: ...  # epoch seconds: a running claim past it was abandoned
    @property
    def token(self) -> str: ...
    @property
    def answer(self) -> Mapping[str, Any] | None: ...
    @property
    def answer_bytes(self) -> int: ...


class KeptCalls(Protocol):
    """The store of keys and answers (`kiln.accounting.idempotency.CallKeys`). Blocking."""

    @property
    def wait_s(self) -> float: ...

    def look(self, scope: Scope) -> Held | None: ...

    def claim(self, scope: Scope, digest: str, lease_s: float) -> tuple[str | None, Held | None]:
        """(a new claim's token, None), or (None, what holds the key)."""
        ...

    def take_over(self, scope: Scope, token: str, lease_s: float) -> str | None: ...

    def keep(self, scope: Scope, token: str, answer: Mapping[str, Any]) -> None: ...

    def release(self, scope: Scope, token: str) -> None: ...


def _bad_key(request_id: RequestId, where: str) -> InvalidParamsError:
    return InvalidParamsError(f"Invalid params: {where} must be {KEY_RULE}", request_id=request_id)


def header_key(value: str) -> str | None:
    """The key an `Idempotency-Key` header names (an sf-string or bare); None if malformed."""
    if len(value) >= 2 and value[0] == value[-1] == '"':
        value = value[1:-1]
    return value if _KEY.fullmatch(value) else None


def with_header_key(envelope: Envelope, headers: Mapping[str, str]) -> Envelope:
    """A tools/call's key, checked, in its `_meta` (where an `Idempotency-Key` header put it)."""
    meta = envelope.params.get("_meta")
    sent = meta.get(META_KEY) if isinstance(meta, dict) else None
    where = f'params._meta["{META_KEY}"]'
    if sent is not None and not (isinstance(sent, str) and _KEY.fullmatch(sent)):
        raise _bad_key(envelope.request_id, where)
    value = header(headers, HEADER)
    if value is None:
        return envelope
    key = header_key(value)
    if key is None:
        raise _bad_key(envelope.request_id, "the Idempotency-Key header")
    if sent is not None and sent != key:
        raise InvalidParamsError(
            f"Invalid params: the Idempotency-Key header and {where} name different keys; "
            "send one of them",
            request_id=envelope.request_id,
        )
    params = {**envelope.params, "_meta": {**(meta if isinstance(meta, dict) else {}),
                                           META_KEY: key}}  # fmt: skip
    return replace(envelope, params=params)


def key_of(params: Mapping[str, Any]) -> str | None:
    meta = params.get("_meta")
    key = meta.get(META_KEY) if isinstance(meta, dict) else None
    return key if isinstance(key, str) else None


def digest_of(tool: str, arguments: Any) -> str:
    """What "the same call" means: the tool and its arguments, as canonical JSON."""
    text = json.dumps([tool, arguments], sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def caller_label(ctx: CallContext) -> str:
    """Whose keys these are: the principal (anonymous callers by their address) and view."""
    who = ctx.principal
    label = str(getattr(who, "label", "anonymous")) if who is not None else "anonymous"
    if who is None and ctx.arrival.client_address:
        label += f"@{ctx.arrival.client_address}"
    return f"{label}|{ctx.view.name if ctx.view is not None else ''}"


def repeatable(tool: ToolView) -> bool:
    """Whether running the tool twice is harmless, by its own annotations."""
    hints = tool.annotations or {}
    return hints.get("readOnlyHint") is True or hints.get("idempotentHint") is True


def _refusal(message: str, reason: Reason, key: str, rid: RequestId, **more: Any) -> ProtocolError:
    data = {"reason": reason, "idempotencyKey": key, **more}
    return IdempotencyConflictError(message, request_id=rid, data=data)


@dataclass(eq=False)
class Once:
    """One keyed call: its scope and claim. `claim` is called just before the tool runs (or
    its task is created); `ran` once it did, so the wrapper knows what may be replayed."""

    store: KeptCalls
    scope: Scope
    digest: str
    lease_s: float
    request_id: RequestId
    token: str | None = None
    ran: bool = False

    async def claim(self, tool: ToolView) -> None:
        """Claim the key for this run; AnsweredBefore or a refusal when it is taken."""
        if self.token is not None:
            return
        store = self.store
        token, held = await asyncio.to_thread(store.claim, self.scope, self.digest, self.lease_s)
        if token is not None:
            self.token = token
            return
        assert held is not None
        held = await self.settled(held)
        abandoned = held.state == "running" and held.lease_until <= time.time()
        if abandoned and held.digest == self.digest and repeatable(tool):  # harmless again
            taken = await asyncio.to_thread(store.take_over, self.scope, held.token, self.lease_s)
            if taken is not None:
                self.token = taken
                return
            held = await asyncio.to_thread(store.look, self.scope) or held
        raise AnsweredBefore(self.answer(held))

    async def first_answer(self) -> dict[str, Any] | None:
        """What the key answered before (or raises why it cannot); None: run the call (its
        key is free, or its claim was abandoned: `claim` takes it over or says why not)."""
        held = await asyncio.to_thread(self.store.look, self.scope)
        if held is None:
            return None
        held = await self.settled(held)
        live = held.state == "done" or held.lease_until > time.time()
        return self.answer(held) if live or held.digest != self.digest else None

    async def settled(self, held: Held) -> Held:
        """`held`, or what it became while its call ran: polled for up to the store's wait."""
        deadline = time.monotonic() + self.store.wait_s
        pause = 0.1
        while held.state == "running" and held.lease_until > time.time():
            if time.monotonic() + pause > deadline:
                break
            await asyncio.sleep(pause)
            pause = min(pause * 2, 1.0)
            found = await asyncio.to_thread(self.store.look, self.scope)
            if found is None:
                break
            held = found
        return held

    def answer(self, held: Held) -> dict[str, Any]:
        """The first call's result; raises its error, or the refusal that says why not."""
        key, rid, tool = self.scope.key, self.request_id, self.scope.tool
        first = f"first sent at {held.started_at}"
        if held.digest != self.digest:
            raise _refusal(
                f"Idempotency key already used: it named a call of '{tool}' with other "
                f"arguments ({first}); a key names one call, so send a new key",
                "other_arguments", key, rid,
            )  # fmt: skip
        if held.state == "running":
            left = held.lease_until - time.time()
            if left > 0:
                raise _refusal(
                    f"The call of '{tool}' with this idempotency key is still running ({first});"
                    " send it again later to get its result",
                    "in_progress", key, rid, retryAfterSeconds=max(1, int(left + 0.999)),
                )  # fmt: skip
            raise _refusal(
                f"The call of '{tool}' with this idempotency key ({first}) was interrupted "
                "before its answer was kept: it may have run, so it is not run again. Check "
                "whether it took effect, and send a new key to run it again",
                "outcome_unknown", key, rid,
            )  # fmt: skip
        answer = held.answer or {}
        if isinstance(answer.get("error"), Mapping):
            error = answer["error"]
            replayed = ProtocolError(str(error.get("message", "")), request_id=rid,
                                     data=error.get("data"))  # fmt: skip
            code = error.get("code")
            replayed.code = code if isinstance(code, int) else REFUSED
            raise replayed
        if not isinstance(answer.get("result"), Mapping):
            raise _refusal(
                f"The call of '{tool}' with this idempotency key ran ({first}), but its result "
                f"({held.answer_bytes} bytes) was larger than results are kept for, so it "
                "cannot be sent again; it is not run again. Send a new key to run it again",
                "result_not_kept", key, rid, resultBytes=held.answer_bytes,
            )  # fmt: skip
        result = dict(answer["result"])
        meta = result.get("_meta")
        mark = {"idempotencyKey": key, "firstSentAt": held.started_at}
        result["_meta"] = {**(meta if isinstance(meta, dict) else {}), REPLAYED_META_KEY: mark}
        return result


Call = Callable[["CallContext"], Awaitable[dict[str, Any]]]


class IdempotentCalls:
    """Wraps a catalog tool's tools/call (`Dispatcher._call_tool`) when it carries a key."""

    def __init__(self, store: KeptCalls | None) -> None:
        self.store = store

    async def call(self, envelope: Envelope, ctx: CallContext, call: Call) -> dict[str, Any]:
        key = key_of(envelope.params)
        name = envelope.params.get("name")
        store = self.store
        if key is None or store is None or not isinstance(name, str):
            return await call(ctx)  # no store (an in-memory backend): the key is not kept
        left = ctx.time_left_s
        once = Once(
            store, Scope(caller_label(ctx), name, key),
            digest_of(name, envelope.params.get("arguments", {})),
            lease_s=(DEFAULT_LEASE_S if left is None else left) + LEASE_MARGIN_S,
            request_id=envelope.request_id,
        )  # fmt: skip
        first = await once.first_answer()
        if first is not None:
            return first
        try:
            result = await call(replace(ctx, once=once))
        except AnsweredBefore as before:
            return before.result
        except ProtocolError as error:
            await self._after_error(once, error)
            raise
        # Any other failure (a bug, a cancel) leaves the claim: once its lease passes, a
        # repeatable tool runs again and any other is answered `outcome_unknown`.
        final = result.get("resultType") != "input_required"  # a question: no answer yet
        await self._settle(once, {"result": result} if once.ran and final else None)
        return result

    async def _after_error(self, once: Once, error: ProtocolError) -> None:
        if not once.ran and isinstance(error, RateLimitedError | UnavailableError):
            await self._settle(once, None)  # refused before it ran: a retry runs it
        elif once.ran and not isinstance(error, UnavailableError):
            kept = {"code": error.code, "message": error.message, "data": error.data}
            await self._settle(once, {"error": {k: v for k, v in kept.items() if v is not None}})
        # else: it ran and its answer could not be kept (the store refused its ledger entry),
        # or it may have run: the claim stays, and once its lease passes, `outcome_unknown`.

    async def _settle(self, once: Once, answer: Mapping[str, Any] | None) -> None:
        """Keep the answer before it is sent; None: give the key back (nothing ran, or the
        run asked a question and the call goes on in the client's next request)."""
        store, token = self.store, once.token
        if store is None or token is None:
            return
        try:
            if answer is not None:
                await asyncio.to_thread(store.keep, once.scope, token, answer)
            else:
                await asyncio.to_thread(store.release, once.scope, token)
        except Exception:  # the call is answered anyway; a retry finds the claim's lease
            log.exception("could not keep the answer of a keyed call of %s", once.scope.tool)
