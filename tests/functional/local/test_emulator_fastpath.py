"""The emulator answers DynamoDB item requests without moto's web app (emulator/fastpath.py):
the same answers and errors as moto's whole path, request for request."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from botocore.exceptions import ClientError

from kiln.aws.clients import AwsClients, ensure_resources, make_clients
from kiln.local.emulator import run_emulator

TABLE = "kiln-fastpath-test"


def item(pk: str, sk: str, **more: Any) -> dict[str, Any]:
    return {"pk": {"S": pk}, "sk": {"S": sk}, **more}


def conversation(db: Any, table: str) -> list[Any]:
    """Item requests as Kiln makes them, with their answers (or errors): reads, writes,
    conditions that fail, a cancelled transaction, pages, filters and projections."""
    said: list[Any] = []

    def ask(operation: str, **params: Any) -> None:
        try:
            answer = getattr(db, operation)(TableName=table, **params)
        except ClientError as error:
            said.append((operation, "error", error.response["Error"],
                         error.response.get("CancellationReasons")))  # fmt: skip
        else:
            answer.pop("ResponseMetadata", None)
            said.append((operation, answer))

    deep = {"M": {"l": {"L": [{"N": "1"}, {"NULL": True}]}}}
    for n in range(12):
        more = {"tool": {"S": f"t{n % 3}"}, "n": {"N": str(n)}, "tags": {"SS": ["a", "b"]},
                "on": {"BOOL": n % 2 == 0}, "deep": deep}  # fmt: skip
        ask("put_item", Item=item("day", f"{n:03d}", **more))
    ask("put_item", Item=item("day", "000"), ConditionExpression="attribute_not_exists(pk)")
    ask("put_item", Item=item("day", "000", n={"N": "0"}), ReturnValues="ALL_OLD")
    ask("get_item", Key=item("day", "003"))
    ask("get_item", Key=item("day", "999"))
    ask("get_item", Key=item("day", "004"), ProjectionExpression="#t, n",
        ExpressionAttributeNames={"#t": "tool"}, ConsistentRead=True)  # fmt: skip
    ask("update_item", Key=item("count", "one"), UpdateExpression="ADD n :one",
        ExpressionAttributeValues={":one": {"N": "1"}}, ReturnValues="ALL_NEW")  # fmt: skip
    ask("update_item", Key=item("count", "one"), UpdateExpression="SET n = :z",
        ConditionExpression="n > :big", ReturnValuesOnConditionCheckFailure="ALL_OLD",
        ExpressionAttributeValues={":z": {"N": "0"}, ":big": {"N": "5"}})  # fmt: skip
    query = {"KeyConditionExpression": "pk = :pk AND sk BETWEEN :lo AND :hi",
             "ExpressionAttributeValues": {":pk": {"S": "day"}, ":lo": {"S": "001"},
                                           ":hi": {"S": "010"}}}  # fmt: skip
    ask("query", **query, ScanIndexForward=False, Limit=4)
    ask("query", **query, Limit=3, ExclusiveStartKey=item("day", "004"))
    filtered = {**query["ExpressionAttributeValues"], ":t": {"S": "t1"}}
    ask("query", KeyConditionExpression=query["KeyConditionExpression"],
        ExpressionAttributeValues=filtered, FilterExpression="tool = :t", Limit=5,
        ReturnConsumedCapacity="TOTAL")  # fmt: skip
    ask("query", KeyConditionExpression="pk = :pk", ExpressionAttributeValues={":pk": {"S": "no"}})
    ask("query", KeyConditionExpression="nope = :pk",
        ExpressionAttributeValues={":pk": {"S": "day"}})  # fmt: skip
    ask("scan", Limit=5)
    ask("delete_item", Key=item("day", "011"), ReturnValues="ALL_OLD")
    ask("delete_item", Key=item("day", "010"), ConditionExpression="attribute_not_exists(pk)")
    said.append(transactions(db, table))
    return said


def transactions(db: Any, table: str) -> list[Any]:
    said: list[Any] = []
    ok = [{"Put": {"TableName": table, "Item": item("tx", "a")}},
          {"Update": {"TableName": table, "Key": item("count", "one"),
                      "UpdateExpression": "ADD n :one",
                      "ExpressionAttributeValues": {":one": {"N": "1"}}}}]  # fmt: skip
    said.append(db.transact_write_items(TransactItems=ok).get("ItemCollectionMetrics"))
    check = {"TableName": table, "Key": item("tx", "a"),
             "ConditionExpression": "attribute_not_exists(pk)"}  # fmt: skip
    cancelled = [{"Put": {"TableName": table, "Item": item("tx", "b")}}, {"ConditionCheck": check}]
    try:
        db.transact_write_items(TransactItems=cancelled)
    except ClientError as error:
        said.append((error.response["Error"]["Code"], error.response.get("CancellationReasons")))
    batch = db.batch_get_item(RequestItems={table: {"Keys": [item("tx", "a"), item("tx", "b"),
                                                             item("count", "one")]}})  # fmt: skip
    said.append(sorted(str(found) for found in batch["Responses"][table]))
    gets = db.transact_get_items(TransactItems=[{"Get": {"TableName": table,
                                                         "Key": item("day", "002")}}])  # fmt: skip
    said.append(gets["Responses"])
    return said


def run(state: Path, *, fast_items: bool) -> tuple[list[Any], str]:
    """The conversation's answers from an emulator, and the Server header of a GetItem's."""
    with run_emulator(state, fast_items=fast_items) as endpoint:
        keys = (endpoint.credentials.access_key_id, endpoint.credentials.secret_access_key)
        clients = make_clients(endpoint_url=endpoint.url, region=endpoint.region, credentials=keys)
        ensure_resources(clients, table=TABLE, bucket=TABLE)
        return conversation(clients.dynamodb, TABLE), server_of_a_get(clients)


def server_of_a_get(clients: AwsClients) -> str:
    headers: dict[str, str] = {}
    clients.dynamodb.meta.events.register(
        "after-call.dynamodb.GetItem",
        lambda http_response, **_: headers.update(http_response.headers),
    )
    clients.dynamodb.get_item(TableName=TABLE, Key=item("day", "003"))
    return headers.get("Server") or headers.get("server") or ""


def test_item_requests_get_the_answers_and_errors_that_motos_whole_path_gives(
    tmp_path: Path,
) -> None:
    expected, moto_server = run(tmp_path / "moto", fast_items=False)
    got, fast_server = run(tmp_path / "fast", fast_items=True)
    assert got == expected
    assert "amazon.com" in moto_server  # moto's web app names itself so
    assert "amazon.com" not in fast_server, f"a GetItem went through moto's web app: {fast_server}"
