"""The AWS resources a test (or a benchmark) works in: the emulator's endpoint, clients, and
a table and bucket of its own (made by the `aws` fixture in conftest.py)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from kiln.aws.clients import AwsClients
from kiln.local.emulator.privacy import write_private


@dataclass(frozen=True)
class AwsStack:
    endpoint_url: str
    clients: AwsClients
    table: str
    bucket: str


def key_emulator(state: Path) -> None:
    """Key an emulator's state directory with the tests' fake credentials, so that it takes
    the requests every client and subprocess of the tests signs."""
    key = {
        "access_key_id": os.environ["AWS_ACCESS_KEY_ID"],
        "secret_access_key": os.environ["AWS_SECRET_ACCESS_KEY"],
    }
    write_private(state / "credentials.json", json.dumps(key).encode())
