"""Conformance fixture: returns one image block (a 1x1 PNG)."""

import json
import sys

json.load(sys.stdin)  # no arguments; read them anyway, as the script contract says

PNG_1PX = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5E"
    "rkJggg=="
)
print(
    json.dumps(
        {
            "kiln/content": [
                {"type": "image", "data": PNG_1PX, "mimeType": "image/png"},
            ]
        }
    )
)
