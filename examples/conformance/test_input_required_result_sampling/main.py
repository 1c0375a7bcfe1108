"""Conformance fixture (2026-07-28): asks the client's model a question, then reports its answer."""

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
question = {"role": "user", "content": {"type": "text", "text": "What is the capital of France?"}}
reply = ask("capital_question", sampling={"messages": [question], "maxTokens": 100})
if reply is None:
    sys.exit(0)
print(f"The model said: {reply['content'].get('text', '')}")
