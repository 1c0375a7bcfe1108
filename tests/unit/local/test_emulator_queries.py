"""The emulator's moto answers a Query from the page it returns, not its whole partition."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from kiln.local.emulator import motofix


@pytest.fixture(scope="module")
def table() -> Iterator[Any]:
    motofix.install()
    with mock_aws():
        db = boto3.client("dynamodb", region_name="us-east-1")
        db.create_table(
            TableName="t", BillingMode="PAY_PER_REQUEST",
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"},
                       {"AttributeName": "sk", "KeyType": "RANGE"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"},
                                  {"AttributeName": "sk", "AttributeType": "S"}],
        )  # fmt: skip
        for start in range(0, 1600, 25):
            puts = [{"PutRequest": {"Item": {"pk": {"S": "day"}, "sk": {"S": f"{i:05d}"}}}}
                    for i in reversed(range(start, start + 25))]  # fmt: skip
            db.batch_write_item(RequestItems={"t": puts})
        yield db


def read_per_query(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    from moto.dynamodb.models.table import Table

    sizes: list[int] = []
    all_items = Table.all_items

    def counted(self: Any) -> Any:
        found = all_items(self)
        sizes.append(len(found))
        return found

    monkeypatch.setattr(Table, "all_items", counted)
    return sizes


def keys(db: Any, **query: Any) -> list[str]:
    found: list[str] = []
    for page in db.get_paginator("query").paginate(TableName="t", **query):
        found += [item["sk"]["S"] for item in page["Items"]]
    return found


def test_a_newest_first_page_of_a_range_reads_that_page_only(
    table: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    sizes = read_per_query(monkeypatch)
    answer = table.query(
        TableName="t", Limit=10, ScanIndexForward=False,
        KeyConditionExpression="pk = :p AND sk BETWEEN :lo AND :hi",
        ExpressionAttributeValues={":p": {"S": "day"}, ":lo": {"S": "00100"},
                                   ":hi": {"S": "01500"}},
    )  # fmt: skip
    assert [item["sk"]["S"] for item in answer["Items"]] == [
        f"{i:05d}" for i in range(1500, 1490, -1)
    ]
    assert answer["LastEvaluatedKey"]["sk"] == {"S": "01491"}
    assert sizes == [11]  # the page and one more, of 1,600 items


@pytest.mark.parametrize(
    ("condition", "values", "expected"),
    [
        ("sk > :a", {":a": "01590"}, [f"{i:05d}" for i in range(1591, 1600)]),
        ("sk <= :a", {":a": "00004"}, [f"{i:05d}" for i in range(5)]),
        ("sk = :a", {":a": "00777"}, ["00777"]),
        ("begins_with(sk, :a)", {":a": "0159"}, [f"{i:05d}" for i in range(1590, 1600)]),
    ],
)
def test_every_key_condition_pages_through_the_same_items_as_before(
    table: Any, condition: str, values: dict[str, str], expected: list[str]
) -> None:
    attrs = {":p": {"S": "day"}, **{k: {"S": v} for k, v in values.items()}}
    for forward in (True, False):
        found = keys(table, Limit=3, ScanIndexForward=forward, ExpressionAttributeValues=attrs,
                     KeyConditionExpression=f"pk = :p AND {condition}")  # fmt: skip
        assert found == (expected if forward else expected[::-1])
