"""Conformance fixture (2026-07-28): two rounds of questions, the second after the first."""

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


def form(field):
    return {"type": "object", "properties": {field: {"type": "string"}}, "required": [field]}


step1 = ask(
    "step1", elicitation={"message": "Step 1: What is your name?", "requestedSchema": form("name")}
)
if step1 is None:
    sys.exit(0)
step2 = ask(
    "step2",
    elicitation={
        "message": "Step 2: What is your favorite color?",
        "requestedSchema": form("color"),
    },
)
if step2 is None:
    sys.exit(0)
print(f"{step1['content']['name']} likes {step2['content']['color']}")
