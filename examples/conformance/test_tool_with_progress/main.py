"""Conformance fixture: reports progress 0, 50 and 100 of 100 while it runs."""

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
for step in (0, 50, 100):
    say(progress=step, total=100, message=f"{step}% done")
    if step < 100:
        time.sleep(0.05)
print("Progress test completed")
