"""Conformance fixture (2026-07-28): asks the user, the model and the client's roots at once."""

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
question = {"role": "user", "content": {"type": "text", "text": "Say hello"}}
name = ask(
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
hello = ask("greeting", sampling={"messages": [question], "maxTokens": 50})
roots = ask("client_roots", roots={})
if name is None or hello is None or roots is None:
    sys.exit(0)
print(
    f"{hello['content'].get('text', '')} {name['content']['name']}, {len(roots['roots'])} root(s)"
)
