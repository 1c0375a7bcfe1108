"""Shared fixtures: the local emulator over HTTP, and fresh AWS resources per test."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from support.aws import AwsStack, fresh_stack, key_emulator

# Fails the session if a key or secret planted by a test shows up in any log line.
# Fails a test whose functions made an AWS call their role in template.yaml does not allow.
pytest_plugins = ["support.leakguard", "support.iam_roles"]

# Tests never touch real AWS: fake credentials and a fixed region for every client.
os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ.pop("AWS_PROFILE", None)


@pytest.fixture(scope="session")
def moto_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Kiln's local emulator (moto in a child process, signed requests only, journaled),
    keyed with the tests' fake credentials so that every client and subprocess signs."""
    from kiln.local.emulator import run_emulator
    from support.iam_roles import call_log_path

    state = tmp_path_factory.mktemp("emulator")
    key_emulator(state)
    # DynamoDB's own per-partition limits: a hot item throttles here as it would in AWS.
    limits = "3000/1000"
    with run_emulator(state, call_log=call_log_path(state), partition_limits=limits) as endpoint:
        yield endpoint.url


@pytest.fixture
def aws(moto_endpoint: str) -> AwsStack:
    """A table and a bucket of their own for one test, on the shared moto server."""
    return fresh_stack(moto_endpoint)
