"""The partition keys Kiln really writes: the public function's (ledger, quotas) match the
template's LeadingKeys patterns; the catalog's, views' and keys' never do."""

from __future__ import annotations

import fnmatch
from pathlib import Path

from cfnlint.decode import decode

from conftest import AwsStack
from kiln.access.quotas import Quota, QuotaCounters
from kiln.access.view_store import ViewStore
from kiln.access.views import check_view
from kiln.accounting.ledger import CallLedger, CallRecord
from kiln.catalog.rules import check_draft
from kiln.catalog.store import CatalogStore
from kiln.identity.keys import KeyStore

TEMPLATE = Path(__file__).resolve().parents[3] / "template.yaml"


def public_write_patterns() -> list[str]:
    template, problems = decode(str(TEMPLATE))
    assert template is not None, problems
    policies = template["Resources"]["McpFunction"]["Properties"]["Policies"]
    (statement,) = [
        s for p in policies for s in p["Statement"] if s.get("Sid") == "WriteLedgerAndQuotas"
    ]
    return list(statement["Condition"]["ForAllValues:StringLike"]["dynamodb:LeadingKeys"])


def partitions(aws: AwsStack) -> set[str]:
    items = aws.clients.dynamodb.scan(TableName=aws.table)["Items"]
    return {item["pk"]["S"] for item in items}


def allowed(partition: str, patterns: list[str]) -> bool:
    return any(fnmatch.fnmatchcase(partition, pattern) for pattern in patterns)


def test_ledger_and_quota_writes_fall_under_the_public_functions_grant(aws: AwsStack) -> None:
    before = partitions(aws)  # a new table's marks (kiln.aws.clients.ensure_resources)
    quotas = QuotaCounters(aws.clients.dynamodb, table=aws.table)
    quotas.admit("key:abc", Quota(calls_per_minute=5, run_seconds_per_day=10))
    quotas.charge("key:abc", 1.5)
    quotas.admit("view:sales", Quota(calls_per_minute=5))
    ledger = CallLedger(aws.clients.dynamodb, table=aws.table, digest_key=b"k")
    ledger.record(CallRecord(at="", caller="anonymous", tool="t", outcome="ok"))
    ledger.day_totals.flush()  # this process's counts of the day (once per interval)
    written = partitions(aws) - before
    # the key's minute and day counters, the view's minute, a shard of the day's ledger, one
    # of its totals and the day's shard count
    assert len(written) == 6
    assert all(allowed(p, public_write_patterns()) for p in written), written


def test_catalog_view_and_key_writes_fall_outside_it(aws: AwsStack) -> None:
    before = partitions(aws)  # a new table's marks (kiln.aws.clients.ensure_resources)
    store = CatalogStore(aws.clients.dynamodb, aws.clients.s3, table=aws.table, bucket=aws.bucket)
    draft = {"name": "LEDGER", "description": "d", "language": "python", "code": "print(1)\n"}
    store.create(check_draft(draft))
    ViewStore(aws.clients.dynamodb, table=aws.table).put(
        check_view({"name": "quota", "tools": ["LEDGER"]}), expected_revision=None
    )
    KeyStore(aws.clients.dynamodb, table=aws.table).create("QUOTA", "call")
    written = partitions(aws) - before
    assert len(written) >= 5
    assert not any(allowed(p, public_write_patterns()) for p in written), written
