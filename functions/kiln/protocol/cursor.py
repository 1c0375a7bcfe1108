"""Opaque tools/list cursors: an offset bound to the list it pages through, signed with HMAC.

A cursor names a position in one specific list (identified by its fingerprint). Editing the
offset, pasting a cursor from another list or another server, or paging after the list has
changed all fail verification, and the caller gets -32602 instead of a wrong page.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac

_MAC_BYTES = 16


class CursorError(ValueError):
    """The cursor was not issued by this server for this list."""


class CursorCodec:
    def __init__(self, secret: bytes) -> None:
        self._secret = secret

    def _mac(self, payload: bytes) -> bytes:
        return hmac.new(self._secret, payload, hashlib.sha256).digest()[:_MAC_BYTES]

    def encode(self, offset: int, fingerprint: str) -> str:
        payload = f"{offset}:{fingerprint}".encode()
        return base64.urlsafe_b64encode(self._mac(payload) + payload).decode().rstrip("=")

    def decode(self, cursor: str, fingerprint: str) -> int:
        """The offset the cursor points at; raises CursorError when it is not ours."""
        try:
            raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        except (binascii.Error, ValueError) as exc:
            raise CursorError("the cursor is not one this server issued") from exc
        mac, payload = raw[:_MAC_BYTES], raw[_MAC_BYTES:]
        if len(mac) != _MAC_BYTES or not hmac.compare_digest(mac, self._mac(payload)):
            raise CursorError("the cursor is not one this server issued")
        offset_text, _, list_fingerprint = payload.decode().partition(":")
        if list_fingerprint != fingerprint:
            raise CursorError("the tool list changed since this cursor was issued; list again")
        return int(offset_text)
