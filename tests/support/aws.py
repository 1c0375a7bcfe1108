"""The AWS resources a test (or a benchmark) works in: the emulator's endpoint, clients, and
a table and bucket of its own (made by the `aws` fixture in conftest.py)."""

from __future__ import annotations

from dataclasses import dataclass

from kiln.aws.clients import AwsClients


@dataclass(frozen=True)
class AwsStack:
    endpoint_url: str
    clients: AwsClients
    table: str
    bucket: str
