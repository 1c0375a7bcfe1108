"""Conformance fixture: always returns a tool error (isError: true)."""

import json
import sys

json.load(sys.stdin)  # no arguments; read them anyway, as the script contract says

print(
    json.dumps(
        {
            "kiln/content": [
                {"type": "text", "text": "This tool intentionally returns an error for testing"},
            ],
            "isError": True,
        }
    )
)
