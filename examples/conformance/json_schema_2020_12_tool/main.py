"""Conformance fixture: takes a contact record (Kiln validates it first) and says ok."""

import json
import sys

json.load(sys.stdin)
print("ok")
