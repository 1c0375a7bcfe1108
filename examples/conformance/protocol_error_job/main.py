"""Conformance fixture: ends the call in a JSON-RPC error instead of a result (`kiln/error`)."""

import json
import sys

json.load(sys.stdin)
print(json.dumps({"kiln/error": {"message": "protocol_error_job failed on purpose"}}))
