"""The approvals webhook: a signed JSON POST to a configured URL for each new waiting approval.

It follows Standard Webhooks (https://www.standardwebhooks.com), signed by its reference
library (`standardwebhooks`), so any receiver that verifies Standard Webhooks verifies Kiln's:

    webhook-id: msg_<approval id>            the same on every retry of one event
    webhook-timestamp: 1764857000            seconds since the epoch, when this try was sent
    webhook-signature: v1,<base64>           HMAC-SHA256 with the secret's bytes over
                                             "<webhook-id>.<webhook-timestamp>.<body>"

A receiver refuses a message whose signature does not match (forged), whose timestamp is more
than five minutes from its clock (replayed late), or whose `webhook-id` it has already
accepted (replayed within those five minutes: it keeps the ids it accepted at least that
long). The body is

    {"type": "approval.pending", "timestamp": "<ISO 8601>", "data": {<the approval, as
     GET /api/approvals/{id} shows it>, "links": {"approve": ..., "deny": ..., "inbox": ...}}}

A try that gets no 2xx answer within 10 s is tried again after `backoff_s`, then twice as long
each time, `attempts` tries in all; a 4xx other than 408/429 is not retried (the receiver
refused the message itself).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import KW_ONLY, dataclass, field
from datetime import UTC, datetime
from typing import Any

log = logging.getLogger("kiln.approvals.webhook")
TRY_TIMEOUT_S = 10.0
EVENT = "approval.pending"


def signed(secret: str, message_id: str, body: bytes, *, now: float) -> dict[str, str]:
    """The Standard Webhooks headers of one try of a message."""
    from standardwebhooks import Webhook

    moment = datetime.fromtimestamp(int(now), UTC)
    return {
        "content-type": "application/json",
        "webhook-id": message_id,
        "webhook-timestamp": str(int(now)),
        "webhook-signature": Webhook(secret).sign(message_id, moment, body),
    }


def event_body(data: Mapping[str, Any], *, now: float) -> bytes:
    stamp = datetime.fromtimestamp(now, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    return json.dumps({"type": EVENT, "timestamp": stamp, "data": dict(data)}).encode()


def _post(url: str, body: bytes, headers: Mapping[str, str]) -> int:
    # `url` is the operator's KILN_APPROVAL_WEBHOOK_URL, checked to be http(s) by settings
    request = urllib.request.Request(url, data=body, headers=dict(headers), method="POST")  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=TRY_TIMEOUT_S) as answer:  # noqa: S310
            return int(answer.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


@dataclass(eq=False)
class Webhook:
    """Delivers one approval event, retried with backoff (blocking sends, off the loop)."""

    url: str
    secret: str
    _: KW_ONLY
    attempts: int = 5
    backoff_s: float = 2.0
    clock: Callable[[], float] = time.time
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    post: Callable[[str, bytes, Mapping[str, str]], int] = field(default=_post)

    async def deliver(self, message_id: str, data: Mapping[str, Any]) -> bool:
        """True once the receiver answered 2xx; False after the last try (logged)."""
        body = event_body(data, now=self.clock())
        wait = self.backoff_s
        for attempt in range(1, self.attempts + 1):
            headers = signed(self.secret, message_id, body, now=self.clock())
            try:
                status = await asyncio.to_thread(self.post, self.url, body, headers)
            except OSError as error:
                status, why = 0, str(error)
            else:
                why = f"HTTP {status}"
            if 200 <= status < 300:
                return True
            final = 400 <= status < 500 and status not in (408, 429)
            log.warning(
                "approval webhook %s: try %d of %d failed (%s)%s",
                message_id, attempt, self.attempts, why, "; not retried" if final else "",
            )  # fmt: skip
            if final or attempt == self.attempts:
                break
            await self.sleep(wait)
            wait *= 2
        log.error("approval webhook %s was not delivered", message_id)
        return False
