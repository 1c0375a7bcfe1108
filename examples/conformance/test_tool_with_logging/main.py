"""Conformance fixture: writes three info log messages while it runs."""

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
for message in ("Tool execution started", "Tool processing data", "Tool execution completed"):
    say(log="info", data=message)
    time.sleep(0.05)
print("Logging test completed")
