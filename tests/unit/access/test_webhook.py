"""The approvals webhook's signature, as the Standard Webhooks spec defines it, and its retries."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
from collections.abc import Mapping

from kiln.access.webhook import Webhook, signed

KEY = b"0123456789abcdef0123456789abcdef"
SECRET = "whsec_" + base64.b64encode(KEY).decode()


def test_the_signature_is_hmac_sha256_over_id_timestamp_and_body_with_the_secrets_bytes() -> None:
    body = b'{"type":"approval.pending"}'
    headers = signed(SECRET, "msg_1", body, now=1764857000.9)
    assert headers["webhook-id"] == "msg_1"
    assert headers["webhook-timestamp"] == "1764857000"
    mac = hmac.new(KEY, b"msg_1.1764857000." + body, hashlib.sha256).digest()
    assert headers["webhook-signature"] == "v1," + base64.b64encode(mac).decode()


def deliver(answers: list[int]) -> tuple[bool, list[float], list[str]]:
    slept: list[float] = []
    stamps: list[str] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    def post(url: str, body: bytes, headers: Mapping[str, str]) -> int:
        stamps.append(headers["webhook-id"])
        return answers.pop(0)

    hook = Webhook("http://127.0.0.1:9/x", SECRET, attempts=4, backoff_s=1.0, sleep=sleep,
                   post=post)  # fmt: skip
    return asyncio.run(hook.deliver("msg_a", {"id": "a"})), slept, stamps


def test_a_failed_try_is_tried_again_with_a_doubling_wait_under_the_same_id() -> None:
    assert deliver([503, 500, 204]) == (True, [1.0, 2.0], ["msg_a"] * 3)


def test_it_gives_up_after_the_last_try_and_never_retries_a_refusal() -> None:
    assert deliver([503, 503, 503, 503]) == (False, [1.0, 2.0, 4.0], ["msg_a"] * 4)
    assert deliver([401]) == (False, [], ["msg_a"])
    assert deliver([429, 204]) == (True, [1.0], ["msg_a"] * 2)
