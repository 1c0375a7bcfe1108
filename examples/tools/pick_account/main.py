import json
import os
import sys

talk = os.fdopen(int(os.environ["KILN_TALK_FD"]), "w", buffering=1)
answers = json.loads(os.environ["KILN_ANSWERS"])


def say(**line):  # progress, a log line, or a question: one JSON object per line
    talk.write(json.dumps(line) + "\n")


def ask(key, **question):  # the answer, or None once asked (then end the run)
    if key not in answers:
        say(ask=key, **question)
    return answers.get(key)


amount = json.load(sys.stdin)["amount"]
say(progress=1, total=3, message="looking up accounts")
accounts = ["checking", "savings", "brokerage"]  # same every run: the question must not change
form = {"type": "object", "properties": {"account": {"type": "string", "enum": accounts}}}
pick = ask("account", elicitation={"message": f"Pay {amount} from?", "requestedSchema": form})
if pick is None:
    sys.exit(0)  # Kiln returns the question; the next call runs this again with the answer
if pick["action"] != "accept":
    sys.exit(f"Nothing paid: the user chose {pick['action']}")
say(log="info", data=f"paying {amount} from {pick['content']['account']}")
say(progress=3, total=3)
print(f"Paid {amount} from {pick['content']['account']}")
