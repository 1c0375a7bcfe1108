"""Fixtures for functional tests: a real app over the moto server."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from conftest import AwsStack
from kiln.settings import Settings
from support.app import AUTHOR_KEY, RunningKiln, serve


@pytest.fixture
def kiln_settings(aws: AwsStack, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    return Settings(
        bundle_cache_dir=tmp_path_factory.mktemp("bundle-cache"),
        table=aws.table,
        bucket=aws.bucket,
        endpoint_url=aws.endpoint_url,
        region="us-east-1",
        author_key=AUTHOR_KEY,
        bind_host="127.0.0.1",
        local_time_budget_s=30.0,
    )


@pytest.fixture
def kiln_server(kiln_settings: Settings, aws: AwsStack) -> Iterator[RunningKiln]:
    yield from serve(kiln_settings, aws)


@pytest.fixture
def make_server(aws: AwsStack) -> Iterator[Callable[..., RunningKiln]]:
    """Start servers with custom settings; all stop at the end of the test."""
    running: list[Iterator[RunningKiln]] = []

    def start(settings: Settings) -> RunningKiln:
        gen = serve(settings, aws)
        running.append(gen)
        return next(gen)

    yield start
    for gen in running:
        for _ in gen:
            pass
