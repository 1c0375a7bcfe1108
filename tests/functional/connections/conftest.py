"""What the connections tests share: a real OAuth provider per module, an SSM client."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from support.oidc_provider import OidcProvider, oidc_provider


@pytest.fixture(scope="module")
def provider() -> Iterator[OidcProvider]:
    with oidc_provider() as running:
        yield running


@pytest.fixture
def ssm(moto_endpoint: str) -> Any:
    return boto3.session.Session(region_name="us-east-1").client("ssm", endpoint_url=moto_endpoint)
