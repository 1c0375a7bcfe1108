"""Conformance fixture: returns one audio block (a tiny WAV)."""

import json
import sys

json.load(sys.stdin)  # no arguments; read them anyway, as the script contract says

WAV_MIN = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA="
print(
    json.dumps(
        {
            "kiln/content": [
                {"type": "audio", "data": WAV_MIN, "mimeType": "audio/wav"},
            ]
        }
    )
)
