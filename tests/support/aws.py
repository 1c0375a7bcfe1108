"""The AWS resources a test (or a benchmark) works in: the emulator's endpoint, clients, and
a table and bucket of its own (made by the `aws` fixture in conftest.py)."""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass
from pathlib import Path

from kiln.aws.clients import AwsClients, ensure_resources, make_clients
from kiln.local.emulator.privacy import write_private


@dataclass(frozen=True)
class AwsStack:
    endpoint_url: str
    clients: AwsClients
    table: str
    bucket: str


def fresh_stack(endpoint: str, prefix: str = "kiln-test") -> AwsStack:
    """A table and a bucket of their own on the emulator at `endpoint`."""
    suffix = uuid.uuid4().hex[:10]
    clients = make_clients(endpoint_url=endpoint, region="us-east-1")
    stack = AwsStack(endpoint, clients, f"{prefix}-{suffix}", f"{prefix}-{suffix}")
    ensure_resources(clients, table=stack.table, bucket=stack.bucket)
    return stack


def key_emulator(state: Path) -> None:
    """Key an emulator's state directory with the tests' fake credentials, so that it takes
    the requests every client and subprocess of the tests signs."""
    key = {
        "access_key_id": os.environ["AWS_ACCESS_KEY_ID"],
        "secret_access_key": os.environ["AWS_SECRET_ACCESS_KEY"],
    }
    write_private(state / "credentials.json", json.dumps(key).encode())
