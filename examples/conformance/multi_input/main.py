"""Conformance fixture (tasks extension): asks two questions at once, then reports both answers."""

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
form = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "confirm": {"type": "boolean"}},
}
first = ask("first", elicitation={"message": "First answer?", "requestedSchema": form})
second = ask("second", elicitation={"message": "Second answer?", "requestedSchema": form})
if first is None or second is None:
    sys.exit(0)
print(f"{first.get('content', {}).get('name')} and {second.get('content', {}).get('name')}")
