"""What the public endpoint answers when the store (DynamoDB) refuses or does not answer.

Each need says its own name: the catalog ("Catalog unavailable"), a call's quota ("Quota
unavailable") and its ledger entry ("Call not recorded"); all are -32000, retry shortly.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

from kiln.accounting.account import Limits
from kiln.accounting.gate import CallGate
from kiln.aws.clients import StoreUnavailableError
from kiln.protocol.errors import UnavailableError

log = logging.getLogger("kiln.serving.backend")
_P = ParamSpec("_P")
_R = TypeVar("_R")


def catalog_reads(
    method: Callable[_P, Coroutine[Any, Any, _R]],
) -> Callable[_P, Coroutine[Any, Any, _R]]:
    """A store that does not answer becomes MCP's "catalog unavailable" error."""

    @functools.wraps(method)
    async def reading(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return await method(*args, **kwargs)
        except StoreUnavailableError as error:
            log.warning("catalog unavailable: %s", error)
            raise UnavailableError(
                "Catalog unavailable: the tool catalog did not answer in time; retry shortly",
                data={"retryAfterSeconds": error.retry_after_s},
            ) from error

    return reading


# A call's ledger entry or quota claim the store refused (throttled) or did not answer: not
# "catalog unavailable", which would send its author looking at the wrong thing.
NOT_RECORDED = (
    "Call not recorded: the tool ran, but its call could not be written to the call ledger "
    "(the store refused the write or did not answer in time), and a call that is not recorded "
    "is not answered; retry shortly"
)
QUOTA_UNCHECKED = (
    "Quota unavailable: this call's quota could not be checked (the store refused the update "
    "or did not answer in time), so the tool was not run; retry shortly"
)


def unavailable(message: str, error: StoreUnavailableError) -> UnavailableError:
    log.warning("%s: %s", message.partition(":")[0].lower(), error)
    return UnavailableError(message, data={"retryAfterSeconds": error.retry_after_s})


def admit(gate: CallGate, limits: Limits) -> None:
    """Count the call against its quotas (blocking); a store that cannot is QUOTA_UNCHECKED."""
    try:
        gate.admit(limits)
    except StoreUnavailableError as error:
        raise unavailable(QUOTA_UNCHECKED, error) from error
