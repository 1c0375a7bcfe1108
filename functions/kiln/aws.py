"""boto3 clients, made once at the edge and passed in; and the catalog's own resources."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import boto3
from botocore.config import Config

# The single table: pk/sk strings. Item kinds are told apart by key prefixes
# (see catalog/store.py and bundles/store.py); no index is needed.
TABLE_DEFINITION: dict[str, Any] = {
    "AttributeDefinitions": [
        {"AttributeName": "pk", "AttributeType": "S"},
        {"AttributeName": "sk", "AttributeType": "S"},
    ],
    "KeySchema": [
        {"AttributeName": "pk", "KeyType": "HASH"},
        {"AttributeName": "sk", "KeyType": "RANGE"},
    ],
    "BillingMode": "PAY_PER_REQUEST",
}


@dataclass(frozen=True)
class AwsClients:
    dynamodb: Any
    s3: Any
    session: Any = None


def make_clients(
    *, endpoint_url: str | None = None, region: str | None = None, profile: str | None = None
) -> AwsClients:
    """Clients for DynamoDB and S3; `endpoint_url` points them at moto or DynamoDB Local."""
    session = boto3.session.Session(profile_name=profile, region_name=region)
    config = Config(retries={"max_attempts": 3, "mode": "standard"}, tcp_keepalive=True)
    kwargs: dict[str, Any] = {"config": config}
    if endpoint_url:
        kwargs["endpoint_url"] = endpoint_url
    return AwsClients(
        dynamodb=session.client("dynamodb", **kwargs),
        s3=session.client("s3", **kwargs),
        session=session,
    )


def ensure_resources(clients: AwsClients, *, table: str, bucket: str) -> None:
    """Create the table and bucket if they are missing (local stacks and tests only)."""
    dynamodb, s3 = clients.dynamodb, clients.s3
    try:
        dynamodb.describe_table(TableName=table)
    except dynamodb.exceptions.ResourceNotFoundException:
        dynamodb.create_table(TableName=table, **TABLE_DEFINITION)
        dynamodb.get_waiter("table_exists").wait(
            TableName=table, WaiterConfig={"Delay": 0.2, "MaxAttempts": 50}
        )
    try:
        s3.head_bucket(Bucket=bucket)
    except s3.exceptions.ClientError:
        region = s3.meta.region_name
        if region and region != "us-east-1":
            s3.create_bucket(
                Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": region}
            )
        else:
            s3.create_bucket(Bucket=bucket)
