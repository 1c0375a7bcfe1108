"""A bundle's move into `ready` or out of it, written as a catalog write.

What a bundle resolved to is what its tools' served fingerprints are taken over ("pending"
while it is not ready: catalog/README.md, fingerprints). So those two moves are one
transaction with the catalog's version step and a change-log entry naming the bundle
(kiln.catalog.changelog): every process's snapshot reads the bundle again before its next
`tools/list`, as it does a saved tool, and no list reads a bundle record itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from kiln.catalog.changelog import cancel_codes, commit

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient


def announced(dynamodb: DynamoDBClient, table: str, update: dict[str, Any]) -> dict[str, Any]:
    """Commit `update` (an UpdateItem's arguments) with the catalog's version step; the item
    as it is then. Its own condition failing raises ConditionalCheckFailedException, as the
    plain update would."""
    try:
        commit(dynamodb, table, [{"Update": update}])
    except ClientError as error:
        if cancel_codes(error)[:1] == ["ConditionalCheckFailed"]:
            raise dynamodb.exceptions.ConditionalCheckFailedException(
                error.response,
                "TransactWriteItems",
            ) from None
        raise
    read = dynamodb.get_item(TableName=table, Key=update["Key"], ConsistentRead=True)
    return dict(read["Item"])  # just written, and bundle records are never deleted
