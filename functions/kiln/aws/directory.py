"""A listing partition: one small item per member, so a list is one Query, never a Scan.

Keys (`KEY#<hash>`) and bundles (`BUNDLE#<id>`) each live in a partition of their own, and
listing them once meant a Scan of the whole table: with the call ledger in the same table,
every `GET /api/keys` read every call ever made. Now each member also has an item
`pk = DIR#<kind>, sk = <member>`, written in the same transaction that creates the member,
and a listing is a Query of that partition plus a BatchGetItem of the members.

A table written before directories existed is listed by one Scan, once: the members it finds
are added to the directory and a marker item says that it is complete. A table created with
directories has that marker from the start (`mark_new_table`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_dynamodb.type_defs import TransactWriteItemTypeDef

MARKER = "#complete"  # sorts before every member id (hex digits, names)
BATCH_GET = 100  # BatchGetItem's limit


KINDS = ("keys", "bundles")


def mark_new_table(dynamodb: DynamoDBClient, table: str) -> None:
    """A table just created has every directory complete (there is nothing to scan for)."""
    for kind in KINDS:
        item = {"pk": {"S": f"DIR#{kind}"}, "sk": {"S": MARKER}}
        dynamodb.put_item(TableName=table, Item=item)


class Directory:
    def __init__(
        self,
        dynamodb: DynamoDBClient,
        *,
        table: str,
        kind: str,
        key_of: Callable[[str], dict[str, Any]],
        legacy: Callable[[], Iterable[str]],
    ) -> None:
        self._db = dynamodb
        self._table = table
        self._pk = f"DIR#{kind}"
        self._key_of = key_of  # a member's own item key
        self._legacy = legacy  # every member, the old way (a Scan): for the first listing

    def put(self, member: str) -> TransactWriteItemTypeDef:
        """The transaction item that adds `member` (write it with the member's own item)."""
        return {"Put": {"TableName": self._table, "Item": self._entry(member)}}

    def items(self) -> Iterator[dict[str, Any]]:
        """The members' own items (in no particular order)."""
        members = self._members()
        for i in range(0, len(members), BATCH_GET):
            yield from self._batch_get([self._key_of(m) for m in members[i : i + BATCH_GET]])

    def _entry(self, member: str) -> dict[str, Any]:
        return {"pk": {"S": self._pk}, "sk": {"S": member}}

    def _members(self) -> list[str]:
        found: list[str] = []
        complete = False
        paginator = self._db.get_paginator("query")
        for page in paginator.paginate(
            TableName=self._table,
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": {"S": self._pk}},
            ConsistentRead=True,
        ):
            for item in page["Items"]:
                member = item["sk"]["S"]
                if member == MARKER:
                    complete = True
                else:
                    found.append(member)
        if complete:
            return found
        return self._complete(found)

    def _complete(self, found: list[str]) -> list[str]:
        members = sorted(set(found) | set(self._legacy()))
        for member in members:
            if member not in found:
                self._db.put_item(TableName=self._table, Item=self._entry(member))
        self._db.put_item(TableName=self._table, Item=self._entry(MARKER))
        return members

    def _batch_get(self, keys: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        request: dict[str, Any] = {self._table: {"Keys": keys, "ConsistentRead": True}}
        while request:
            answer = self._db.batch_get_item(RequestItems=request)
            yield from answer.get("Responses", {}).get(self._table, [])
            request = answer.get("UnprocessedKeys") or {}
