"""Conformance fixture (2026-07-28 diagnostic): asks for sampling whatever the client declared."""

import json
import os
import sys

talk = os.fdopen(int(os.environ["KILN_TALK_FD"]), "w", buffering=1)
answers = json.loads(os.environ.get("KILN_ANSWERS", "{}"))
json.load(sys.stdin)
if "pick" not in answers:
    question = {"role": "user", "content": {"type": "text", "text": "Pick a number"}}
    talk.write(json.dumps({"ask": "pick", "sampling": {"messages": [question], "maxTokens": 5}}))
    sys.exit(0)
print(f"The model picked {answers['pick']['content'].get('text', '')}")
