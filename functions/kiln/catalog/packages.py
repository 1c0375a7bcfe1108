"""What each served bundle resolved to, as a snapshot carries it: the digest a revision with
packages is fingerprinted over (catalog/fingerprint.py, catalog/README.md).

A bundle's record (`BUNDLE#<id>|META`, kiln/bundles/store.py) says whether it is ready and,
once it is, the digest of the exact versions it installed (`resolved_sha256`,
kiln/bundles/resolved.py). A bundle turning ready, or leaving ready to be rebuilt, steps the
catalog version and names the bundle in the change log (catalog/changelog.py), so a snapshot
reads these records when it is made (one BatchGetItem for up to 100 bundles) and when the log
names them, never per request: listing stays one cached snapshot.

Per bundle id: its digest when ready; `None` while it is not (pending, building, failed, or
no record yet); `LEGACY` when it is ready but was built before records kept the digest.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

BUNDLE_PREFIX = "BUNDLE#"  # a bundle record's pk (kiln.bundles.store)
LEGACY = ""  # ready, built before builds recorded what they resolved to
_BATCH = 100  # BatchGetItem's most keys per request


def read_packages(
    ddb: DynamoDBClient, table: str, bundle_ids: Iterable[str]
) -> dict[str, str | None]:
    """Each bundle's digest (LEGACY, or None while not ready): strongly consistent reads."""
    wanted = sorted(set(bundle_ids))
    found: dict[str, str | None] = dict.fromkeys(wanted)
    for start in range(0, len(wanted), _BATCH):
        keys = [
            {"pk": {"S": BUNDLE_PREFIX + bundle_id}, "sk": {"S": "META"}}
            for bundle_id in wanted[start : start + _BATCH]
        ]
        request = {
            table: {
                "Keys": keys,
                "ConsistentRead": True,
                "ProjectionExpression": "pk, #status, resolved_sha256",
                "ExpressionAttributeNames": {"#status": "status"},
            }
        }
        while request:
            page = ddb.batch_get_item(RequestItems=request)  # type: ignore[arg-type]
            for item in page.get("Responses", {}).get(table, []):
                if item.get("status", {}).get("S") == "ready":
                    bundle_id = item["pk"]["S"][len(BUNDLE_PREFIX) :]
                    found[bundle_id] = item.get("resolved_sha256", {}).get("S") or LEGACY
            request = page.get("UnprocessedKeys") or {}  # type: ignore[assignment]
    return found
