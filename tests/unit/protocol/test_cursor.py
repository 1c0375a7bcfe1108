"""Signed tools/list cursors."""

from __future__ import annotations

import pytest

from kiln.protocol.cursor import CursorCodec, CursorError


def test_cursor_round_trips_its_offset() -> None:
    codec = CursorCodec(b"k")
    assert codec.decode(codec.encode(150, "fp"), "fp") == 150


def test_cursor_is_opaque() -> None:
    cursor = CursorCodec(b"k").encode(50, "fp")
    assert "50" not in cursor or len(cursor) > 20


@pytest.mark.parametrize("cursor", ["", "!!!", "QUJD", "a" * 400])
def test_garbage_is_refused(cursor: str) -> None:
    with pytest.raises(CursorError):
        CursorCodec(b"k").decode(cursor, "fp")


def test_cursor_for_another_list_is_refused() -> None:
    codec = CursorCodec(b"k")
    with pytest.raises(CursorError, match="changed"):
        codec.decode(codec.encode(50, "old"), "new")


def test_cursor_signed_with_another_secret_is_refused() -> None:
    with pytest.raises(CursorError, match="not one this server issued"):
        CursorCodec(b"k").decode(CursorCodec(b"other").encode(50, "fp"), "fp")
