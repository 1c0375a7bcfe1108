"""Bundle records in DynamoDB and bundle files in S3.

Item: pk=`BUNDLE#<id>`, sk=`META`. Files: `bundles/<id>.zip`, `bundles/<id>.manifest.json`
(the lock: resolved versions, sizes, hashes, duration) and `bundles/<id>.log` (the build log).

Status moves only by conditional writes, so two writers can never both win:

    pending -> building -> ready
                        -> failed -> pending (retry)
    building (stale: its builder died) -> pending (retry)

A move into `ready` or out of it is a catalog write too (announce.py): it moves what the
bundle's tools are fingerprinted over.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

from kiln.aws.directory import Directory
from kiln.bundles.errors import AmbiguousBundleIdError, BundleIdError, BundleStateError
from kiln.bundles.identity import bundle_id, normalise_requirements, parse_target
from kiln.bundles.resolved import described

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_s3 import S3Client

Status = Literal["pending", "building", "ready", "failed"]

PREFIX = "BUNDLE#"
SORT_KEY = "META"
KEY_PREFIX = "bundles/"

# A build that has not finished after this long lost its builder (a Lambda builder is
# stopped after 15 minutes); it may be retried.
STALE_BUILD_AFTER = timedelta(minutes=20)


@functools.cache
def _codec() -> tuple[Any, Any]:
    """boto3's attribute-value codec, made on first use: importing boto3 pulls in s3transfer
    and multiprocessing, which a process that only reads the catalog never needs."""
    from boto3.dynamodb.types import TypeDeserializer, TypeSerializer

    return TypeSerializer(), TypeDeserializer()


ID_LENGTH = 32
ID_RULE = "a bundle id is 32 lower-case hex digits; any unique prefix of one will do"
_HEX = re.compile(r"[0-9a-f]{1,32}")


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def parse_iso(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def zip_key(bundle_id: str) -> str:
    return f"{KEY_PREFIX}{bundle_id}.zip"


def manifest_key(bundle_id: str) -> str:
    return f"{KEY_PREFIX}{bundle_id}.manifest.json"


def log_key(bundle_id: str) -> str:
    return f"{KEY_PREFIX}{bundle_id}.log"


@dataclass(frozen=True)
class BundleRecord:
    id: str
    status: Status
    language: str
    target: str
    requirements: tuple[str, ...]
    created_at: str
    updated_at: str
    started_at: str | None = None
    finished_at: str | None = None
    error: str | None = None
    log_key: str | None = None
    size: int | None = None  # zip bytes
    unpacked_size: int | None = None
    sha256: str | None = None  # of the zip, checked after every download
    file_count: int | None = None
    duration_s: float | None = None
    build_count: int = 0  # builds that finished ready
    attempts: int = 0  # builds started
    # What the last build that finished ready installed (bundles/resolved.py): sorted
    # `name==version --hash=…` lines, and their digest; () and None until then.
    resolved: tuple[str, ...] = ()
    resolved_sha256: str | None = None

    @property
    def zip_key(self) -> str:
        return zip_key(self.id)

    @property
    def manifest_key(self) -> str:
        return manifest_key(self.id)

    def to_json(self) -> dict[str, Any]:
        """The record as the REST API and the CLI show it."""
        return {
            "id": self.id,
            "status": self.status,
            "language": self.language,
            "target": self.target,
            "requirements": list(self.requirements),
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "error": self.error,
            "log_key": self.log_key,
            "size": self.size,
            "unpacked_size": self.unpacked_size,
            "sha256": self.sha256,
            "file_count": self.file_count,
            "duration_s": self.duration_s,
            "build_count": self.build_count,
            "attempts": self.attempts,
            "resolved": list(self.resolved),
            "resolved_sha256": self.resolved_sha256,
        }

    @classmethod
    def from_item(cls, item: Mapping[str, Any]) -> BundleRecord:
        deserializer = _codec()[1]
        data = {k: deserializer.deserialize(v) for k, v in item.items()}

        def opt_int(name: str) -> int | None:
            value = data.get(name)
            return None if value is None else int(value)

        duration = data.get("duration_s")
        return cls(
            id=str(data["pk"])[len(PREFIX) :],
            status=data["status"],
            language=data["language"],
            target=data["target"],
            requirements=tuple(data.get("requirements", [])),
            created_at=data["created_at"],
            updated_at=data["updated_at"],
            started_at=data.get("started_at"),
            finished_at=data.get("finished_at"),
            error=data.get("error"),
            log_key=data.get("log_key"),
            size=opt_int("size"),
            unpacked_size=opt_int("unpacked_size"),
            sha256=data.get("sha256"),
            file_count=opt_int("file_count"),
            duration_s=None if duration is None else float(duration),
            build_count=int(data.get("build_count", 0)),
            attempts=int(data.get("attempts", 0)),
            resolved=tuple(data.get("resolved", [])),
            resolved_sha256=data.get("resolved_sha256"),
        )


def _key(bundle_id: str) -> dict[str, Any]:
    return {"pk": {"S": PREFIX + bundle_id}, "sk": {"S": SORT_KEY}}


def _values(values: Mapping[str, Any]) -> dict[str, Any]:
    serializer = _codec()[0]
    return {name: serializer.serialize(value) for name, value in values.items()}


class BundleStore:
    """Bundle records (DynamoDB) and files (S3); clients are injected."""

    def __init__(self, dynamodb: DynamoDBClient, s3: S3Client, *, table: str, bucket: str) -> None:
        self.dynamodb = dynamodb
        self.s3 = s3
        self.table = table
        self.bucket = bucket
        self._directory = Directory(
            dynamodb, table=table, kind="bundles", key_of=_key, legacy=self._scan_ids
        )

    # -- records ---------------------------------------------------------------------------

    def ensure(
        self, language: str, target: str, requirements: Sequence[str]
    ) -> BundleRecord | None:
        """The bundle for these requirements, recorded `pending` if it did not exist yet.

        None when the requirements are empty. Safe to race: one conditional put wins, the
        others read what it wrote.
        """
        identity = bundle_id(language, target, requirements)
        if identity is None:
            return None
        now = now_iso()
        item = {
            **_key(identity),
            **_values(
                {
                    "kind": "bundle",
                    "status": "pending",
                    "language": language,
                    "target": target,
                    "requirements": list(normalise_requirements(language, requirements)),
                    "created_at": now,
                    "updated_at": now,
                    "build_count": 0,
                    "attempts": 0,
                }
            ),
        }
        try:
            self.dynamodb.transact_write_items(
                TransactItems=[
                    {"Put": {"TableName": self.table, "Item": item,
                             "ConditionExpression": "attribute_not_exists(pk)"}},
                    self._directory.put(identity),
                ]
            )  # fmt: skip
        except self.dynamodb.exceptions.TransactionCanceledException:
            existing = self.get(identity)
            if existing is not None:
                return existing
            raise
        return BundleRecord.from_item(item)

    def get(self, bundle_id: str) -> BundleRecord | None:
        response = self.dynamodb.get_item(
            TableName=self.table, Key=_key(bundle_id), ConsistentRead=True
        )
        item = response.get("Item")
        return None if item is None else BundleRecord.from_item(item)

    def resolve(self, ref: str, among: Iterable[str] | None = None) -> str:
        """The full id that `ref` (an id or any unique prefix of one) names; else BundleIdError.
        With `among`, a prefix is matched against those ids only (what a caller may see)."""
        if not _HEX.fullmatch(ref):
            raise BundleIdError(f"bundle id {ref!r}: {ID_RULE}")
        if len(ref) == ID_LENGTH:
            return ref
        ids = among if among is not None else (record.id for record in self.list())
        matches = sorted({found for found in ids if found.startswith(ref)})
        if not matches:
            raise BundleIdError(f"bundle {ref}: no bundle id starts with it")
        if len(matches) > 1:
            raise AmbiguousBundleIdError(
                f"bundle {ref}: ambiguous, {len(matches)} bundles start with it "
                f"({', '.join(m[: len(ref) + 4] + '…' for m in matches[:5])}); give more digits"
            )
        return matches[0]

    def list(self) -> list[BundleRecord]:
        """Every bundle, newest first."""
        records = [BundleRecord.from_item(item) for item in self._directory.items()]
        return sorted(records, key=lambda r: (r.created_at, r.id), reverse=True)

    def _scan_ids(self) -> Sequence[str]:
        """Every bundle's id, by a Scan of the whole table: only for a table written before
        bundles had a directory (kiln.aws.directory), once."""
        found: list[str] = []
        kwargs: dict[str, Any] = {
            "TableName": self.table,
            "FilterExpression": "begins_with(pk, :prefix) AND sk = :sk",
            "ExpressionAttributeValues": _values({":prefix": PREFIX, ":sk": SORT_KEY}),
            "ConsistentRead": True,
        }
        while True:
            page = self.dynamodb.scan(**kwargs)
            found.extend(str(item["pk"]["S"])[len(PREFIX) :] for item in page.get("Items", []))
            if "LastEvaluatedKey" not in page:
                break
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]
        return found

    # -- status transitions ----------------------------------------------------------------

    def _transition(
        self,
        bundle_id: str,
        *,
        allowed: Callable[[BundleRecord], bool],
        expected: Sequence[str],
        updates: Mapping[str, Any],
        removes: Sequence[str] = (),
        adds: Mapping[str, int] | None = None,
        also: str = "",
        also_values: Mapping[str, Any] | None = None,
        announce: bool = False,
    ) -> BundleRecord:
        names = {f"#{name}": name for name in [*updates, *removes, *(adds or {})]}
        names["#status"] = "status"
        values = {f":{name}": value for name, value in updates.items()}
        values.update({f":add_{name}": amount for name, amount in (adds or {}).items()})
        values.update({f":expect{i}": status for i, status in enumerate(expected)})
        values.update(also_values or {})
        expression = "SET " + ", ".join(f"#{name} = :{name}" for name in updates)
        if adds:
            expression += " ADD " + ", ".join(f"#{name} :add_{name}" for name in adds)
        if removes:
            expression += " REMOVE " + ", ".join(f"#{name}" for name in removes)
        condition = (
            "attribute_exists(pk) AND #status IN ("
            + ", ".join(f":expect{i}" for i in range(len(expected)))
            + ")"
        )
        if also:
            condition = f"{condition} AND ({also})"
        update = {
            "TableName": self.table,
            "Key": _key(bundle_id),
            "UpdateExpression": expression,
            "ConditionExpression": condition,
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": _values(values),
        }
        try:
            if announce:  # a catalog write (announce.py)
                # imported here: a run's process reads the bundle cache (which imports this
                # module) under the runner's own Python, which has no botocore
                from kiln.bundles.announce import announced

                item = announced(self.dynamodb, self.table, update)
            else:
                response = self.dynamodb.update_item(**update, ReturnValues="ALL_NEW")  # type: ignore[arg-type]
                item = response["Attributes"]
        except self.dynamodb.exceptions.ConditionalCheckFailedException:
            current = self.get(bundle_id)
            if current is None:
                raise BundleStateError(f"bundle {bundle_id} does not exist") from None
            if allowed(current):  # pragma: no cover - only when a write raced between
                raise BundleStateError(f"bundle {bundle_id} changed meanwhile; try again") from None
            raise BundleStateError(
                f"bundle {bundle_id} is {current.status}, not {' or '.join(expected)}"
            ) from None
        return BundleRecord.from_item(item)

    def mark_building(self, bundle_id: str) -> BundleRecord:
        """pending -> building. Raises BundleStateError when another builder took it."""
        now = now_iso()
        return self._transition(
            bundle_id,
            allowed=lambda r: r.status == "pending",
            expected=["pending"],
            updates={"status": "building", "started_at": now, "updated_at": now},
            removes=["finished_at", "error"],
            adds={"attempts": 1},
        )

    def mark_ready(self, bundle_id: str, manifest: Mapping[str, Any]) -> BundleRecord:
        """building -> ready, with the built zip's size and hash, and what its lock resolved
        to (`resolved`, `resolved_sha256`: bundles/resolved.py), from its manifest."""
        now = now_iso()
        lock = manifest.get("lock")
        resolved = described(manifest["language"], lock) if lock is not None else {}
        return self._transition(
            bundle_id,
            allowed=lambda r: r.status == "building",
            expected=["building"],
            updates={
                "status": "ready",
                "finished_at": now,
                "updated_at": now,
                "size": int(manifest["zip_size"]),
                "unpacked_size": int(manifest["unpacked_size"]),
                "sha256": str(manifest["zip_sha256"]),
                "file_count": int(manifest["file_count"]),
                "duration_s": _decimal(manifest.get("duration_s", 0.0)),
                "log_key": log_key(bundle_id),
                "resolved": resolved.get("resolved", []),
                "resolved_sha256": resolved.get("resolved_sha256"),
            },
            removes=["error"],
            adds={"build_count": 1},
            announce=True,
        )

    def mark_failed(self, bundle_id: str, reason: str, log_key: str | None) -> BundleRecord:
        """building -> failed, keeping why and where the build log is."""
        now = now_iso()
        updates: dict[str, Any] = {
            "status": "failed",
            "finished_at": now,
            "updated_at": now,
            "error": reason[:2000],
        }
        if log_key:
            updates["log_key"] = log_key
        return self._transition(
            bundle_id,
            allowed=lambda r: r.status == "building",
            expected=["building"],
            updates=updates,
        )

    def retry(self, bundle_id: str) -> BundleRecord:
        """failed, a stale build, or ready with its zip gone -> pending.

        A pending bundle is returned unchanged; anything else raises BundleStateError.
        """
        current = self.get(bundle_id)
        if current is None:
            raise BundleStateError(f"bundle {bundle_id} does not exist")
        if current.status == "pending":
            return current
        now = now_iso()
        if current.status == "ready" and not self.zip_exists(bundle_id):
            # Its record says ready but its zip is gone (deleted or expired): build it again.
            return self._transition(
                bundle_id,
                allowed=lambda r: r.status == "ready",
                expected=["ready"],
                updates={"status": "pending", "updated_at": now},
                removes=["started_at", "finished_at"],
                announce=True,
            )
        stale_before = (datetime.now(UTC) - STALE_BUILD_AFTER).isoformat(timespec="milliseconds")
        return self._transition(
            bundle_id,
            allowed=lambda r: r.status == "failed" or is_stale(r),
            expected=["failed", "building"],
            updates={"status": "pending", "updated_at": now},
            removes=["started_at", "finished_at"],
            also="#status = :failed OR started_at < :stale",
            also_values={":failed": "failed", ":stale": stale_before.replace("+00:00", "Z")},
        )

    def requeue_orphan(self, record: BundleRecord) -> BundleRecord:
        """building -> pending for a build whose builder is known to be gone.

        Only for a caller that knows it (a restarted `kiln dev` on its own emulator); the
        condition on `attempts` makes sure it is still the same, unfinished build.
        """
        return self._transition(
            record.id,
            allowed=lambda r: r.status == "building" and r.attempts == record.attempts,
            expected=["building"],
            updates={"status": "pending", "updated_at": now_iso()},
            removes=["started_at"],
            also="attempts = :seen",
            also_values={":seen": record.attempts},
        )

    # -- files -----------------------------------------------------------------------------

    def zip_exists(self, bundle_id: str) -> bool:
        try:
            self.s3.head_object(Bucket=self.bucket, Key=zip_key(bundle_id))
        except self.s3.exceptions.ClientError as error:
            if error.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return False
            raise
        return True

    def read_manifest(self, bundle_id: str) -> dict[str, Any] | None:
        try:
            body = self.s3.get_object(Bucket=self.bucket, Key=manifest_key(bundle_id))["Body"]
        except self.s3.exceptions.NoSuchKey:
            return None
        return dict(json.loads(body.read()))

    def read_log(self, bundle_id: str) -> str | None:
        try:
            body = self.s3.get_object(Bucket=self.bucket, Key=log_key(bundle_id))["Body"]
        except self.s3.exceptions.NoSuchKey:
            return None
        return str(body.read().decode("utf-8", errors="replace"))


def is_stale(record: BundleRecord) -> bool:
    if record.status != "building" or not record.started_at:
        return False
    return datetime.now(UTC) - parse_iso(record.started_at) > STALE_BUILD_AFTER


def _decimal(value: float) -> Any:
    from decimal import Decimal

    return Decimal(str(round(float(value), 3)))


__all__ = [
    "BundleRecord",
    "BundleStateError",
    "BundleStore",
    "Status",
    "log_key",
    "manifest_key",
    "parse_target",
    "zip_key",
]
