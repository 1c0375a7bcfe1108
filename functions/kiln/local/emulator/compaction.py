"""Rewrite the journal as the state it leads to, and replay a journal into a fresh moto.

The dump reads the state through moto's own wire API (DescribeTable, Scan, ListObjects,
GetObject), so it depends on nothing inside moto, and restores through it too (CreateTable,
BatchWriteItem, CreateBucket, PutObject). Only DynamoDB and S3 are dumped: a journal that
holds writes to any other service is left whole.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

from kiln.local.emulator.durable import (
    DurableEmulator,
    Response,
    _Token,
    call,
    put_object_record,
    replay_environ,
)
from kiln.local.emulator.journal import Record

_S3 = "{http://s3.amazonaws.com/doc/2006-03-01/}"
BATCH = 25  # BatchWriteItem's limit
# Items read per Scan page. moto answers a Scan without Limit with every item at once: with
# 5,500 ledger entries the emulator kept 12 MB more after a compaction than with pages.
SCAN_PAGE = 250


def _dynamodb_meta(operation: str, region: str, at: float) -> dict[str, Any]:
    environ = {
        "REQUEST_METHOD": "POST",
        "PATH_INFO": "/",
        "QUERY_STRING": "",
        "SERVER_NAME": "127.0.0.1",
        "SERVER_PORT": "80",
        "HTTP_HOST": "127.0.0.1",
        "CONTENT_TYPE": "application/x-amz-json-1.0",
        "HTTP_X_AMZ_TARGET": f"DynamoDB_20120810.{operation}",
    }
    return {"service": "dynamodb", "region": region, "time": at, "environ": environ}


def _dynamodb(emulator: DurableEmulator, operation: str, region: str, body: Any) -> Any:
    meta = _dynamodb_meta(operation, region, 0.0)
    with emulator.state:
        answer = call(emulator.app, replay_environ(meta, json.dumps(body).encode()))
    if not answer.status.startswith("200"):
        raise RuntimeError(f"{operation} failed while compacting: {answer.body[:200]!r}")
    return json.loads(answer.body)


def _s3_get(emulator: DurableEmulator, path: str, query: str = "") -> Response:
    meta = {
        "service": "s3",
        "region": "us-east-1",
        "time": 0.0,
        "environ": {
            "REQUEST_METHOD": "GET",
            "PATH_INFO": path,
            "RAW_URI": quote(path, safe="/~") + (f"?{query}" if query else ""),
            "QUERY_STRING": query,
            "SERVER_NAME": "127.0.0.1",
            "SERVER_PORT": "80",
            "HTTP_HOST": "127.0.0.1",
        },
    }
    with emulator.state:
        return call(emulator.app, replay_environ(meta, b""))


def _xml(data: bytes) -> ET.Element:
    return ET.fromstring(data)  # noqa: S314 -- moto's own answers, in this process


def _table_records(emulator: DurableEmulator, region: str, at: float) -> Iterator[Record]:
    names = _dynamodb(emulator, "ListTables", region, {}).get("TableNames", [])
    for name in names:
        table = _dynamodb(emulator, "DescribeTable", region, {"TableName": name})["Table"]
        create: dict[str, Any] = {
            "TableName": name,
            "AttributeDefinitions": table["AttributeDefinitions"],
            "KeySchema": table["KeySchema"],
            "BillingMode": "PAY_PER_REQUEST",
        }
        for kind in ("GlobalSecondaryIndexes", "LocalSecondaryIndexes"):
            indexes = [
                {
                    "IndexName": i["IndexName"],
                    "KeySchema": i["KeySchema"],
                    "Projection": i["Projection"],
                }
                for i in table.get(kind) or []
            ]
            if indexes:
                create[kind] = indexes
        yield Record(
            "request", _dynamodb_meta("CreateTable", region, at), json.dumps(create).encode()
        )
        start: dict[str, Any] | None = None
        while True:
            scan: dict[str, Any] = {"TableName": name, "ConsistentRead": True, "Limit": SCAN_PAGE}
            if start:
                scan["ExclusiveStartKey"] = start
            page = _dynamodb(emulator, "Scan", region, scan)
            items = page.get("Items", [])
            for i in range(0, len(items), BATCH):
                writes = [{"PutRequest": {"Item": item}} for item in items[i : i + BATCH]]
                body = json.dumps({"RequestItems": {name: writes}}).encode()
                yield Record("request", _dynamodb_meta("BatchWriteItem", region, at), body)
            start = page.get("LastEvaluatedKey")
            if not start:
                break


def _bucket_records(emulator: DurableEmulator, at: float) -> Iterator[Record]:
    buckets = _xml(_s3_get(emulator, "/").body)
    for bucket in buckets.iter(f"{_S3}Bucket"):
        name = bucket.findtext(f"{_S3}Name") or ""
        location = _xml(_s3_get(emulator, f"/{name}", "location").body).text
        region = location or "us-east-1"
        body = b""
        if region != "us-east-1":
            body = (
                f'<CreateBucketConfiguration xmlns="{_S3[1:-1]}"><LocationConstraint>'
                f"{region}</LocationConstraint></CreateBucketConfiguration>"
            ).encode()
        create = put_object_record(f"/{name}", body, None, region, at)
        create.meta["environ"]["CONTENT_TYPE"] = "application/xml"
        yield create
        token = ""
        while True:
            query = "list-type=2"
            if token:
                query += f"&continuation-token={quote(token, safe='')}"
            page = _xml(_s3_get(emulator, f"/{name}", query).body)
            for content in page.iter(f"{_S3}Contents"):
                key = content.findtext(f"{_S3}Key") or ""
                got = _s3_get(emulator, f"/{name}/{key}")
                headers = {k.lower(): v for k, v in got.headers}
                path = f"/{name}/{key}"
                yield put_object_record(path, got.body, headers.get("content-type"), region, at)
            token = page.findtext(f"{_S3}NextContinuationToken") or ""
            if not token:
                break


def dump(emulator: DurableEmulator, at: float) -> Iterator[Record]:
    """The emulator's whole state as journal records (call with the writers' lock held)."""
    for region in sorted(emulator.regions):
        yield from _table_records(emulator, region, at)
    yield from _bucket_records(emulator, at)
    for token, seen in emulator.tokens.items():
        meta = {
            "token": token,
            "digest": seen.digest.hex(),
            "at": seen.at,
            "status": seen.status,
        }
        yield Record("token", meta, seen.body)


def replay(emulator: DurableEmulator, records: list[Record]) -> None:
    """Apply a journal to a fresh moto, in order."""
    for record in records:
        if record.kind == "token":
            meta = record.meta  # (journals before this one also kept "headers": not needed)
            digest = bytes.fromhex(meta["digest"])
            emulator.tokens[meta["token"]] = _Token(digest, meta["at"], meta["status"], record.body)
            continue
        emulator.apply(record.meta, record.body)
