"""Conformance fixture (2026-07-28): asks the user's name, then greets them."""

import json
import os
import sys

# Kiln's talk-back contract in six lines (README, "Scripts that talk back").
talk = os.fdopen(int(os.environ["KILN_TALK_FD"]), "w", buffering=1)
answers = json.loads(os.environ.get("KILN_ANSWERS", "{}"))


def say(**line):
    talk.write(json.dumps(line) + "\n")


def ask(key, **question):
    """The answer to `key`; None after asking for it (the run then ends, and runs again)."""
    if key not in answers:
        say(ask=key, **question)
    return answers.get(key)


json.load(sys.stdin)
reply = ask(
    "user_name",
    elicitation={
        "message": "What is your name?",
        "requestedSchema": {
            "type": "object",
            "properties": {"name": {"type": "string"}},
            "required": ["name"],
        },
    },
)
if reply is None:
    sys.exit(0)
print(f"Hello, {reply.get('content', {}).get('name', 'stranger')}!")
