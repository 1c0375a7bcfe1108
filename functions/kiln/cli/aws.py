"""The environment a `kiln` command reaches directly: its settings and its AWS clients.

Every command that talks to AWS itself (`--aws`, `bundles build`, `doctor --aws`) gets them
here, so one command makes one botocore session (profile, region, AWS_ENDPOINT_URL) and every
client it needs comes from it. `kiln.cli.main.main` reads the settings once and puts them on the
arguments; a caller may hand over clients as `args.clients` (they are used as they are).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from kiln.settings import Settings

if TYPE_CHECKING:
    from mypy_boto3_lambda import LambdaClient
    from mypy_boto3_ssm import SSMClient

    from kiln.aws.clients import AwsClients


def settings_of(args: argparse.Namespace) -> Settings:
    """What `kiln.cli.main.main` read from the environment (or read here, when called alone)."""
    settings: Settings | None = getattr(args, "settings", None)
    if settings is None:
        settings = args.settings = Settings.from_env()
    return settings


def clients_of(args: argparse.Namespace) -> AwsClients:
    """The environment's DynamoDB and S3 (and the session for more), made once per command."""
    clients: AwsClients | None = getattr(args, "clients", None)
    if clients is None:
        from kiln.stack import aws_clients

        clients = args.clients = aws_clients(settings_of(args))
    return clients


def lambda_of(args: argparse.Namespace) -> LambdaClient:
    """A Lambda client on the command's session (the builder's and the runner's invokes)."""
    session = clients_of(args).session
    client: LambdaClient = session.client("lambda", endpoint_url=settings_of(args).endpoint_url)
    return client


def ssm_of(args: argparse.Namespace) -> SSMClient:
    """An SSM client on the command's session (`kiln secrets --aws`)."""
    session = clients_of(args).session
    client: SSMClient = session.client("ssm", endpoint_url=settings_of(args).endpoint_url)
    return client
