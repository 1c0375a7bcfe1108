"""The rules a tool's own files obey (kiln.catalog.toolfiles)."""

from __future__ import annotations

import base64

from kiln.catalog.toolfiles import MAX_FILE_BYTES, check_files, encode_files


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_files_round_trip_through_their_rest_form() -> None:
    files = {"rates.json": b"{}", "helpers/money.py": b"X = 1\n", "img.bin": bytes(range(256))}
    decoded, problems = check_files(encode_files(files))
    assert problems == []
    assert decoded == files


def test_each_broken_rule_is_named_with_its_file() -> None:
    _, problems = check_files(
        {
            "a/../b": b64(b"x"),
            ".env": b64(b"x"),
            "tool.json": b64(b"x"),
            "big.bin": b64(b"\0" * (MAX_FILE_BYTES + 1)),
            "ok.txt": "%%%",
        }
    )
    assert [(field, rule) for field, rule, _ in problems] == [
        ("files['a/../b']", "path"),
        ("files['.env']", "path"),
        ("files['tool.json']", "path"),
        ("files['big.bin']", "too_large"),
        ("files['ok.txt']", "base64"),
    ]
    assert problems[3][2] == "must be at most 256 KiB"


def test_files_must_be_an_object_of_paths() -> None:
    assert check_files(["a"]) == (
        {},
        [("files", "type", 'must be an object {"relative/path": "<base64>"}')],
    )
