"""Responses are gzipped for clients that accept it: a tools/list of 100 tools is ~70 KB."""

from __future__ import annotations

from typing import Any

from kiln.catalog.rules import check_draft
from support.app import RunningKiln

SCHEMA = {
    "type": "object",
    "properties": {
        "amount": {"type": "number", "description": "The net amount, in pounds and pence."},
        "rate": {"type": "number", "description": "The VAT rate as a fraction, e.g. 0.2."},
        "round": {"type": "boolean", "description": "Round the result to whole pence."},
    },
    "required": ["amount"],
}


def tools_list(kiln: RunningKiln, encoding: str) -> Any:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    return kiln.mcp(body, headers={"Accept-Encoding": encoding, "Accept": "application/json"})


def test_tools_list_of_100_tools_is_a_fifth_of_its_size_or_less_for_a_gzip_client(
    kiln_server: RunningKiln,
) -> None:
    for index in range(100):
        tool = {"name": f"vat_tool_{index:03d}", "language": "python", "input_schema": SCHEMA,
                "description": f"Adds UK VAT to a net amount (variant {index}) and returns "
                               "the net, the VAT and the gross amounts.",
                "code": "print('x')\n"}  # fmt: skip
        kiln_server.kiln.store.create(check_draft(tool), actor="test")
    plain = tools_list(kiln_server, "identity")
    zipped = tools_list(kiln_server, "gzip")
    assert plain.status_code == zipped.status_code == 200, zipped.text
    assert "content-encoding" not in plain.headers
    assert zipped.headers["content-encoding"] == "gzip"
    assert zipped.json() == plain.json()  # httpx decodes it: the same answer
    assert len(zipped.json()["result"]["tools"]) == 100
    ratio = zipped.num_bytes_downloaded / plain.num_bytes_downloaded
    assert ratio <= 0.2, f"{zipped.num_bytes_downloaded} of {plain.num_bytes_downloaded} bytes"


def test_a_small_answer_is_not_compressed(kiln_server: RunningKiln) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    answer = kiln_server.mcp(body, headers={"Accept-Encoding": "gzip"})
    assert answer.status_code == 200
    assert "content-encoding" not in answer.headers
