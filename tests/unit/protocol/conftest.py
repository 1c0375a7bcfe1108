"""Fixtures for the protocol unit tests."""

from __future__ import annotations

import pytest

from kiln.protocol import McpEndpoint, ProtocolSettings
from support.protocol import Client, FakeBackend, add_vat, add_vat_tool


@pytest.fixture
def backend() -> FakeBackend:
    fake = FakeBackend()
    fake.add(add_vat_tool(), add_vat)
    return fake


@pytest.fixture
def settings() -> ProtocolSettings:
    return ProtocolSettings(
        cursor_secret=b"unit-test-secret", loopback_bind=True, instructions="Use add_vat."
    )


@pytest.fixture
def client(backend: FakeBackend, settings: ProtocolSettings) -> Client:
    return Client(McpEndpoint(backend, settings))
