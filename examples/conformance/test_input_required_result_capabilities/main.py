"""Conformance fixture (2026-07-28): asks only what the client can answer (KILN_CAN_ASK)."""

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
can = os.environ.get("KILN_CAN_ASK", "").split()
question = {"role": "user", "content": {"type": "text", "text": "Pick a name"}}
got = []
if "sampling" in can:
    got.append(ask("model_pick", sampling={"messages": [question], "maxTokens": 20}))
if "elicitation" in can:
    got.append(
        ask(
            "user_pick",
            elicitation={
                "message": "What is your name?",
                "requestedSchema": {
                    "type": "object",
                    "properties": {"name": {"type": "string"}},
                    "required": ["name"],
                },
            },
        )
    )
if None in got:
    sys.exit(0)
print(f"asked {len(got)} question(s) this client can answer")
