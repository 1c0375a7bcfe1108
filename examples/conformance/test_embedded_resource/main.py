"""Conformance fixture: returns one embedded text resource."""

import json
import sys

json.load(sys.stdin)  # no arguments; read them anyway, as the script contract says

print(
    json.dumps(
        {
            "kiln/content": [
                {
                    "type": "resource",
                    "resource": {
                        "uri": "test://embedded-resource",
                        "mimeType": "text/plain",
                        "text": "This is an embedded resource content.",
                    },
                },
            ]
        }
    )
)
