"""The emulator applies DynamoDB's per-partition limits, with DynamoDB's own error."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from kiln.aws.clients import TABLE_DEFINITION
from kiln.local.emulator import run_emulator
from kiln.local.emulator.throughput import parse_limits
from support.aws import key_emulator


@pytest.fixture(scope="module")
def dynamodb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    state = tmp_path_factory.mktemp("limited")
    key_emulator(state)
    with run_emulator(state, partition_limits="10/5") as endpoint:
        client = boto3.client(
            "dynamodb", endpoint_url=endpoint.url, region_name="us-east-1",
            config=Config(retries={"total_max_attempts": 1}),
        )  # fmt: skip
        client.create_table(TableName="t", **TABLE_DEFINITION)
        yield client


def put(client: Any, pk: str, sk: str) -> str | None:
    try:
        client.put_item(TableName="t", Item={"pk": {"S": pk}, "sk": {"S": sk}})
    except ClientError as error:
        return str(error.response["Error"]["Code"])
    return None


def test_writes_past_a_partitions_limit_are_throttled_as_dynamodb_does(dynamodb: Any) -> None:
    errors = [put(dynamodb, "LEDGER#hot", str(n)) for n in range(20)]  # 5 a second allowed
    assert "ProvisionedThroughputExceededException" in errors, errors
    assert set(errors) <= {None, "ProvisionedThroughputExceededException"}


def test_the_same_writes_spread_over_partitions_pass(dynamodb: Any) -> None:
    errors = [put(dynamodb, f"LEDGER#cool#{n:02d}", "x") for n in range(20)]
    assert errors == [None] * 20


def test_strongly_consistent_reads_of_one_item_are_limited_too(dynamodb: Any) -> None:
    put(dynamodb, "CATALOG", "VERSION")
    codes = []
    for _ in range(30):  # 10 units a second allowed, one each
        try:
            dynamodb.get_item(TableName="t", Key={"pk": {"S": "CATALOG"}, "sk": {"S": "VERSION"}},
                              ConsistentRead=True)  # fmt: skip
            codes.append(None)
        except ClientError as error:
            codes.append(error.response["Error"]["Code"])
    assert "ProvisionedThroughputExceededException" in codes


def test_limits_are_read_as_reads_slash_writes() -> None:
    assert parse_limits("3000/1000") == (3000.0, 1000.0)
    with pytest.raises(ValueError, match="READS/WRITES"):
        parse_limits("fast")


def test_a_refused_write_changes_nothing(dynamodb: Any) -> None:
    for n in range(20):
        put(dynamodb, "QUOTA#k", f"s{n}")
    items = dynamodb.query(TableName="t", KeyConditionExpression="pk = :p",
                           ExpressionAttributeValues={":p": {"S": "QUOTA#k"}})["Items"]  # fmt: skip
    assert 5 <= len(items) < 20
