"""Digest §7 items 52-53: both eras on one endpoint, decided per request."""

from __future__ import annotations

from support.protocol import Client, body


def test_legacy_call_result_has_no_2026_fields(client: Client) -> None:
    result = body(client.legacy("tools/call", {"name": "add_vat", "arguments": {"net": 1}}))[
        "result"
    ]
    assert "resultType" not in result
    assert "_meta" not in result
