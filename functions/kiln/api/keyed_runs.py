"""Author test runs sent with an `Idempotency-Key` header (`kiln tools call`, the studio's test
console): the same author, tool, arguments and key within the window get the first run's reply
again, as a `tools/call` does (kiln.protocol.idempotency). Their keys are the author's own:
`author:<label>|run`, never shared with the author's `tools/call`s. A refusal is a REST error:
`422 other_arguments`, or `409` with `in_progress`, `outcome_unknown` or `result_not_kept`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import Request

from kiln.api.common import kiln_of, time_left_s
from kiln.api.errors import ApiError
from kiln.authoring.service import TestRun
from kiln.catalog.model import Tool
from kiln.protocol.errors import ProtocolError
from kiln.protocol.idempotency import (
    HEADER,
    KEY_RULE,
    LEASE_MARGIN_S,
    AnsweredBefore,
    IdempotencyConflictError,
    Once,
    Scope,
    digest_of,
    header_key,
)
from kiln.serving.resolved import tool_view

STATUS = {"other_arguments": 422}  # every other reason is a 409 (the IETF draft's conflict)


def once_for(request: Request, who: Any, tool: Tool, arguments: Any) -> Once | None:
    """The run's key, checked (400 if malformed); None without one (or without a store)."""
    value = request.headers.get(HEADER)
    if value is None:
        return None
    key = header_key(value.strip(" \t"))
    if key is None:
        raise ApiError(400, "invalid_idempotency_key", f"Idempotency-Key: must be {KEY_RULE}")
    store = getattr(kiln_of(request).backend, "idempotency", None)
    if store is None:
        return None
    scope = Scope(f"author:{getattr(who, 'label', who)}|run", tool.name, key)
    lease_s = time_left_s(request) + LEASE_MARGIN_S
    return Once(store, scope, digest_of(tool.name, arguments), lease_s, request_id=None)


async def first_answer(once: Once, tool: Tool) -> dict[str, Any] | None:
    """The reply the key got before; None once this run holds the key (it runs)."""
    try:
        first = await once.first_answer()
        if first is None:
            await once.claim(tool_view(tool))
    except AnsweredBefore as before:
        return before.result
    except IdempotencyConflictError as refusal:
        reason = str((refusal.data or {}).get("reason", "conflict"))
        raise ApiError(STATUS.get(reason, 409), reason, refusal.message) from None
    except ProtocolError as replayed:  # a first run that ended in an error: the same error
        raise ApiError(409, "run_failed", replayed.message) from None
    return first


def kept(
    once: Once,
    started: Callable[..., Awaitable[TestRun]],
    reply: Callable[[TestRun], dict[str, Any]],
) -> Callable[..., Awaitable[TestRun]]:
    """`started`, keeping its reply under the key before it is sent (or giving the key back
    when the run did not happen)."""

    async def run(**kw: Any) -> TestRun:
        store, token = once.store, once.token
        assert token is not None
        try:
            done = await started(**kw)
        except BaseException:
            await asyncio.to_thread(store.release, once.scope, token)
            raise
        once.ran = True
        await asyncio.to_thread(store.keep, once.scope, token, {"result": reply(done)})
        return done

    return run
