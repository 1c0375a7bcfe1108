"""Whether a request's client takes URL elicitations: said by the request, on a revision that
has them (kiln.protocol.urlmode)."""

from __future__ import annotations

from typing import Any

import pytest

from kiln.protocol.urlmode import url_mode_of

CAPS = "io.modelcontextprotocol/clientCapabilities"
URL = {"elicitation": {"url": {}}}


@pytest.mark.parametrize(
    ("version", "capabilities", "takes"),
    [
        ("2025-11-25", URL, True),
        ("2026-07-28", URL, True),
        ("2025-06-18", URL, False),  # before URL elicitation existed
        ("2099-01-01", URL, False),  # a revision Kiln does not know
        ("2025-11-25", {"elicitation": {}}, False),  # the empty object means form only
        ("2025-11-25", {"elicitation": {"url": True}}, False),  # not a capability object
        ("2025-11-25", None, False),  # not said: never assumed
    ],
)
def test_url_mode_is_taken_only_where_the_request_declares_it_on_a_revision_that_has_it(
    version: str, capabilities: Any, takes: bool
) -> None:
    meta = {} if capabilities is None else {CAPS: capabilities}
    assert url_mode_of(meta, version) is takes
