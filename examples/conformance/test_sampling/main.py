"""Conformance fixture: asks the client's model to answer `prompt`."""

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


prompt = json.load(sys.stdin)["prompt"]
message = {"role": "user", "content": {"type": "text", "text": prompt}}
reply = ask("answer", sampling={"messages": [message], "maxTokens": 100})
if reply is None:
    sys.exit(0)
print(f"LLM response: {reply['content'].get('text', '')}")
