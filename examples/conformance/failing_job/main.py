"""Conformance fixture: a task-only job that fails as a tool error (isError) after ~1 s."""

import json
import sys
import time

json.load(sys.stdin)
time.sleep(1)
print("failing_job: the job failed on purpose", file=sys.stderr)
sys.exit(1)
