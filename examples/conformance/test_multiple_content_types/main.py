"""Conformance fixture: returns text, an image and an embedded resource."""

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
                {"type": "text", "text": "Multiple content types test:"},
                {"type": "image", "data": PNG_1PX, "mimeType": "image/png"},
                {
                    "type": "resource",
                    "resource": {
                        "uri": "test://mixed-content-resource",
                        "mimeType": "application/json",
                        "text": json.dumps({"test": "data", "value": 123}, separators=(",", ":")),
                    },
                },
            ]
        }
    )
)
