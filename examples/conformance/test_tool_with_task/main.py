"""Conformance fixture (tasks extension): asks a name in the request, then greets from a task."""

import json
import os
import sys
import time

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
if "elicitation" not in os.environ.get("KILN_CAN_ASK", "").split():
    answers["user_name"] = {"action": "accept", "content": {"name": "stranger"}}  # cannot ask
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
if os.environ.get("KILN_TASK") == "later":  # every answer is in: the rest runs as a task
    say(task=True)
    sys.exit(0)
time.sleep(0.5)
print(f"Hello, {reply.get('content', {}).get('name', 'stranger')}! (from a task)")
