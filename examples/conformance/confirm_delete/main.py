"""Conformance fixture (tasks extension): asks to confirm before "deleting" `filename`."""

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


filename = json.load(sys.stdin)["filename"]
form = {"type": "object", "properties": {"confirm": {"type": "boolean"}}, "required": ["confirm"]}
reply = ask("confirm", elicitation={"message": f"Delete {filename}?", "requestedSchema": form})
if reply is None:
    sys.exit(0)  # nothing happens before the answer: the next run acts on it
confirmed = reply["action"] == "accept" and reply.get("content", {}).get("confirm") is True
print(f"Deleted {filename}" if confirmed else f"Kept {filename}")
