"""Conformance fixture: asks the user for a username and an email, showing `message`."""

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


message = json.load(sys.stdin)["message"]
schema = {
    "type": "object",
    "properties": {
        "username": {"type": "string", "description": "User's response"},
        "email": {"type": "string", "description": "User's email address"},
    },
    "required": ["username", "email"],
}
reply = ask("user", elicitation={"message": message, "requestedSchema": schema})
if reply is None:
    sys.exit(0)
print(f"User response: action={reply['action']}, content={json.dumps(reply.get('content'))}")
