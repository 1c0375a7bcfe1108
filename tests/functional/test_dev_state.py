"""`kiln dev`'s mirror of the emulator's state on disk."""

from __future__ import annotations

import uuid
from pathlib import Path

from conftest import AwsStack
from kiln.aws import ensure_resources
from kiln.dev import StateMirror


def test_an_object_overwritten_under_the_same_key_is_restored_with_its_new_content(
    aws: AwsStack, tmp_path: Path
) -> None:
    s3 = aws.clients.s3
    mirror = StateMirror(aws.clients, aws.table, aws.bucket, tmp_path)
    s3.put_object(Bucket=aws.bucket, Key="bundles/x.log", Body=b"FAILED: pip error")
    aws.clients.dynamodb.put_item(
        TableName=aws.table, Item={"pk": {"S": "BUNDLE#x"}, "sk": {"S": "META"}}
    )
    assert mirror.save()
    s3.put_object(Bucket=aws.bucket, Key="bundles/x.log", Body=b"built fine")
    assert mirror.save()
    assert not mirror.save()  # nothing changed since

    fresh = f"kiln-restore-{uuid.uuid4().hex[:8]}"
    ensure_resources(aws.clients, table=fresh, bucket=fresh)
    restored = StateMirror(aws.clients, fresh, fresh, tmp_path)
    assert restored.restore() == 1
    body = s3.get_object(Bucket=fresh, Key="bundles/x.log")["Body"].read()
    assert body == b"built fine"
    assert len([p for p in (tmp_path / "s3").iterdir() if p.name != "index.json"]) == 1
