"""Audit: one structured `kiln.audit` line per write, and the created_by it returns."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime

import pytest

from kiln.identity.audit import created_by, record_write
from kiln.identity.policy import ANONYMOUS, Principal


def test_write_is_logged_as_one_json_line_naming_who_what_when_and_revision(
    caplog: pytest.LogCaptureFixture,
) -> None:
    who = Principal("key", "alice", frozenset({"author", "call"}))
    with caplog.at_level(logging.INFO, logger="kiln.audit"):
        entry = record_write(
            who,
            action="update",
            tool_name="add_vat",
            tool_id="t1",
            revision=4,
            at=datetime(2026, 11, 29, 12, 0, tzinfo=UTC),
        )
    (logged,) = [r for r in caplog.records if r.name == "kiln.audit"]
    assert json.loads(logged.getMessage()) == {
        "audit": "update",
        "created_by": "key:alice",
        "tool": "add_vat",
        "tool_id": "t1",
        "revision": 4,
        "at": "2026-11-29T12:00:00Z",
    }
    assert entry["created_by"] == "key:alice"


def test_created_by_names_each_kind_of_principal() -> None:
    assert created_by(Principal("jwt", "bob", frozenset())) == "jwt:bob"
    assert created_by(ANONYMOUS) == "anonymous"
    assert created_by(None) == "local"


def test_unknown_action_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown audit action 'wipe'"):
        record_write(None, action="wipe", tool_name="x")
