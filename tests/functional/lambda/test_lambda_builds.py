"""What a Lambda function loads: never `kiln.cli` (the `kiln` command) or `kiln.local` (kiln
dev, kiln stdio, the emulator), which its build leaves out (functions/Makefile).

Each handler is imported in a fresh process as the Lambda runtime does (the attribute
lookup builds it), the HTTP ones answer one captured event, and `sys.modules` is read.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import AwsStack

ROOT = Path(__file__).resolve().parents[3]
EVENTS = {
    "mcp": ROOT / "tests" / "events" / "http-api-tools-list.json",
    "admin": ROOT / "tests" / "events" / "http-api-admin-health.json",
}

PROBE = """
import json, sys
import kiln.lambda_handlers as handlers

class Context:
    aws_request_id = "probe"
    function_name = "kiln-probe"
    memory_limit_in_mb = 1024
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:kiln-probe"
    def get_remaining_time_in_millis(self):
        return 30000

handler = getattr(handlers, sys.argv[1])
event = sys.stdin.read()
status = handler(json.loads(event), Context())["statusCode"] if event else None
print(json.dumps({
    "status": status,
    "loaded": sorted(m for m in sys.modules if m.startswith(("kiln.cli", "kiln.local"))),
}))
"""


@pytest.mark.parametrize("handler", ["mcp", "admin", "builder", "worker"])
def test_a_lambda_handler_loads_neither_the_cli_nor_the_local_stack(
    aws: AwsStack, handler: str
) -> None:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("KILN_", "POWERTOOLS_"))}
    event = ""
    if handler in EVENTS:
        loaded_event = json.loads(EVENTS[handler].read_text())
        loaded_event["headers"]["host"] = "127.0.0.1:8000"
        event = json.dumps(loaded_event)
    done = subprocess.run(
        [sys.executable, "-c", PROBE, handler],
        input=event,
        env={
            **clean,
            "PYTHONPATH": str(ROOT / "functions"),
            "AWS_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": aws.endpoint_url,
            "AWS_LAMBDA_FUNCTION_NAME": f"kiln-{handler}",
            "KILN_TABLE": aws.table,
            "KILN_BUCKET": aws.bucket,
            "KILN_AUTHOR_KEY": "probe-author-key-0123456789",
        },
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["loaded"] == [], f"{handler} imported {result['loaded']}"
    if handler in EVENTS:
        assert result["status"] == 200, done.stderr[-3000:]
