"""Tool drafts the tests and benchmarks share."""

from __future__ import annotations

from typing import Any

# The trivial tool: prints its `text` argument back.
ECHO: dict[str, Any] = {
    "name": "echo",
    "description": "Echo the given text back.",
    "language": "python",
    "code": "import json,sys\nprint(json.load(sys.stdin)['text'])\n",
    "input_schema": {"type": "object", "properties": {"text": {"type": "string"}}},
}
