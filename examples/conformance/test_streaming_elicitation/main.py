"""Conformance fixture (2026-07-28 diagnostic): progress, then a question (input_required)."""

import json
import os
import sys

talk = os.fdopen(int(os.environ["KILN_TALK_FD"]), "w", buffering=1)
answers = json.loads(os.environ.get("KILN_ANSWERS", "{}"))
json.load(sys.stdin)
talk.write(json.dumps({"progress": 1, "total": 2, "message": "about to ask"}) + "\n")
if "ok" not in answers:
    form = {"type": "object", "properties": {"ok": {"type": "boolean"}}}
    talk.write(
        json.dumps({"ask": "ok", "elicitation": {"message": "Go on?", "requestedSchema": form}})
    )
    sys.exit(0)
print(f"went on: {answers['ok']['action']}")
