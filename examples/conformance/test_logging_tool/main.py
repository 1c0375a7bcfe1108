"""Conformance fixture (2026-07-28 diagnostic): logs; only a request with a logLevel hears it."""

import json
import os
import sys

talk = os.fdopen(int(os.environ["KILN_TALK_FD"]), "w", buffering=1)
json.load(sys.stdin)
for level in ("debug", "info", "warning"):
    talk.write(json.dumps({"log": level, "data": f"a {level} line"}) + "\n")
print("logged three lines")
