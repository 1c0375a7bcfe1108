"""Conformance fixture: a long-running computation (a sleep) that may run as a task."""

import json
import sys
import time

arguments = json.load(sys.stdin)
seconds = arguments["seconds"]
time.sleep(seconds)
label = arguments.get("label", "slow_compute")
print(f"{label}: computed after {seconds:g} s", end="")
