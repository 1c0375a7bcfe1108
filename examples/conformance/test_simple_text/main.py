"""Conformance fixture: returns one text block."""

import json
import sys

json.load(sys.stdin)  # no arguments; read them anyway, as the script contract says

print(
    json.dumps(
        {
            "kiln/content": [
                {"type": "text", "text": "This is a simple text response for testing."},
            ]
        }
    )
)
