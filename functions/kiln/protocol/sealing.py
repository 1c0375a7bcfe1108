"""Sealed `requestState`: what a tool call's earlier rounds gathered, carried by the client.

A 2026-07-28 server keeps nothing between the rounds of a multi round-trip call (SEP-2322): it
hands the client a `requestState` and gets it back with the next round's `inputResponses`.
The client (or anyone on the way) must not read it, change it, or use it for another call.
So a state is AES-256-GCM ciphertext under a key derived from the server's secret, with the
call it belongs to as associated data: the tool, its revision, the caller and a digest of the
arguments. Its plaintext (the answers so far, the questions of the last round, an expiry) is
never readable from the token, and a token that does not open for *this* call -- tampered,
truncated, made for another caller, tool, revision or arguments, expired, or not Kiln's at
all -- is refused as a whole, before anything runs.

Format: `k1.` + base64url(nonce[12] + ciphertext + tag[16]), no padding.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

PREFIX = "k1."
NONCE_BYTES = 12
MAX_STATE_CHARS = 256 * 1024
DEFAULT_TTL_S = 15 * 60
_BASE64URL = re.compile(r"[A-Za-z0-9_-]+")


class StateRefusedError(Exception):
    """A requestState that does not open for this call; the message never says which check."""


class StateTooLargeError(Exception):
    """What a call gathered no longer fits in a requestState."""


@dataclass(frozen=True)
class Binding:
    """The call a state belongs to."""

    tool: str
    revision: str
    caller: str
    arguments: Mapping[str, Any]

    def associated_data(self) -> bytes:
        digest = hashlib.sha256(_canonical(self.arguments)).hexdigest()
        return _canonical(
            {"v": 1, "tool": self.tool, "rev": self.revision, "who": self.caller, "args": digest}
        )


class StateSealer:
    """Seals and opens request states with one server secret (shared by every process that
    may receive the next round: set KILN_STATE_SECRET when there is more than one)."""

    def __init__(
        self,
        secret: bytes | None = None,
        *,
        ttl_s: float = DEFAULT_TTL_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        # The key is derived on the first seal or open: cryptography's bindings cost a cold
        # start ~70 ms of CPU, and most processes never see a multi round-trip call.
        self._secret = secret or os.urandom(32)
        self._key: Any = None
        self._ttl_s = ttl_s
        self._clock = clock

    @property
    def _aead(self) -> Any:
        if self._key is None:
            from cryptography.hazmat.primitives import hashes
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM
            from cryptography.hazmat.primitives.kdf.hkdf import HKDF

            key = HKDF(
                algorithm=hashes.SHA256(), length=32, salt=None, info=b"kiln request state v1"
            ).derive(self._secret)
            self._key = AESGCM(key)
        return self._key

    def seal(self, binding: Binding, content: Mapping[str, Any]) -> str:
        """A token carrying `content` for this call, valid for the sealer's ttl."""
        nonce = os.urandom(NONCE_BYTES)
        plain = _canonical({"exp": self._clock() + self._ttl_s, "c": dict(content)})
        sealed = self._aead.encrypt(nonce, plain, binding.associated_data())
        token = PREFIX + _encode(nonce + sealed)
        if len(token) > MAX_STATE_CHARS:
            raise StateTooLargeError(
                f"the answers gathered so far need more than {MAX_STATE_CHARS} characters of "
                "requestState"
            )
        return token

    def open(self, token: Any, binding: Binding) -> dict[str, Any]:
        """The content sealed for this call; StateRefusedError for anything else."""
        from cryptography.exceptions import InvalidTag

        if not isinstance(token, str) or not token.startswith(PREFIX):
            raise StateRefusedError()
        if len(token) > MAX_STATE_CHARS:
            raise StateRefusedError()
        body = token[len(PREFIX) :]
        if not _BASE64URL.fullmatch(body):
            raise StateRefusedError()
        try:
            raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
        except (binascii.Error, ValueError):
            raise StateRefusedError() from None
        # One token per ciphertext: no other spelling (spare bits set) is accepted.
        if len(raw) < NONCE_BYTES + 16 or _encode(raw) != body:
            raise StateRefusedError()
        try:
            plain = self._aead.decrypt(
                raw[:NONCE_BYTES], raw[NONCE_BYTES:], binding.associated_data()
            )
        except InvalidTag:
            raise StateRefusedError() from None
        opened = json.loads(plain)
        if not isinstance(opened, dict) or not opened.get("exp", 0) > self._clock():
            raise StateRefusedError()
        content = opened.get("c")
        if not isinstance(content, dict):
            raise StateRefusedError()
        return content


def _encode(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
