"""Conformance fixture: a plain tool (no task support) that says hello."""

import json
import sys

arguments = json.load(sys.stdin)
print(f"Hello, {arguments['name']}!", end="")
