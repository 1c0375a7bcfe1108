"""API keys: created once, stored only as a SHA-256 hash, looked up by that hash."""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import re
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import KW_ONLY, dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

from botocore.exceptions import ClientError

from kiln.access.approvals import CONFIRM_VALUES
from kiln.access.quotas import NO_QUOTA, Quota, check_quota
from kiln.access.waiting import ApproversRuleError, check_approvers
from kiln.aws.directory import Directory
from kiln.errors import KilnError, NameTaken, NotFound

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

log = logging.getLogger("kiln.identity.keys")

Scope = Literal["call", "author"]
SCOPES: tuple[Scope, ...] = ("call", "author")

NAME_RULE = "1-64 characters from A-Z a-z 0-9 . _ -, starting with a letter or digit"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
# token_urlsafe(32) gives 43 characters; anything else is not a Kiln key and costs no lookup.
_SECRET = re.compile(r"^kiln_(call|author)_[A-Za-z0-9_-]{43}$")

# A positive lookup is reused for this long, so a key revoked from another process (the CLI,
# another Lambda container) stops working within CACHE_TTL_S; in this process, at once.
CACHE_TTL_S = 15.0
# last_used_at is written at most this often per key, to keep the hot path to one read.
LAST_USED_EVERY = timedelta(seconds=60)


class KeyStoreError(KilnError):
    """Base for key problems a caller can act on: 400 `bad_request` by default."""


class InvalidKeyNameError(KeyStoreError, status=422, rest_code="invalid_key"):
    pass


class InvalidScopeError(KeyStoreError, status=422, rest_code="invalid_key"):
    pass


class KeyNameTakenError(KeyStoreError, NameTaken):
    pass


class KeyNotFoundError(KeyStoreError, NotFound):
    pass


class InvalidConfirmError(KeyStoreError):
    pass


class InvalidApproversError(InvalidConfirmError):
    pass


def check_key_approvers(approvers: object, confirm: object) -> tuple[str, ...]:
    """A key's `approvers` (kiln.access.waiting): people one of whom approves its calls."""
    try:
        listed = list(approvers) if isinstance(approvers, tuple) else approvers
        return check_approvers(listed, confirm)
    except ApproversRuleError as error:
        raise InvalidApproversError(str(error)) from None


def check_confirm(confirm: object) -> str | None:
    """A key's `confirm` policy: None, "destructive" or "writes"."""
    if confirm is None or confirm in CONFIRM_VALUES:
        return confirm
    raise InvalidConfirmError(
        f"confirm must be one of {', '.join(CONFIRM_VALUES)} (or absent), not {confirm!r}"
    )


@dataclass(frozen=True)
class KeyRecord:
    name: str
    scope: Scope
    key_id: str  # first 12 hex digits of the hash: enough to tell keys apart, useless to attack
    created_at: str
    last_used_at: str | None = None
    revoked_at: str | None = None
    view: str | None = None  # bound to this view: lists and calls only its tools
    quota: Quota = NO_QUOTA
    # "destructive" / "writes": the user approves such calls made with it (access/approvals.py)
    confirm: str | None = None
    approvers: tuple[str, ...] = ()  # ... or one of these people does (access/waiting.py)

    @property
    def revoked(self) -> bool:
        return self.revoked_at is not None


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def looks_like_key(secret: str) -> bool:
    return _SECRET.fullmatch(secret) is not None


def _now_iso(now: datetime) -> str:
    return now.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


@dataclass
class _Cached:
    record: KeyRecord
    digest: str
    expires: float
    last_used_written: float  # monotonic time of this process's last last_used_at write


@dataclass(eq=False)
class KeyStore:
    """Keys in the catalog table: `KEY#<sha256>` items, and `KEYNAME#<name>` for unique names."""

    db: DynamoDBClient
    _: KW_ONLY
    table: str
    cache_ttl_s: float = CACHE_TTL_S
    clock: Callable[[], float] = time.monotonic
    now: Callable[[], datetime] = lambda: datetime.now(UTC)
    _cache: dict[str, _Cached] = field(default_factory=dict, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)
    _warned: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        self._directory = Directory(
            self.db, table=self.table, kind="keys",
            key_of=lambda digest: {"pk": {"S": f"KEY#{digest}"}, "sk": {"S": "KEY"}},
            legacy=lambda: (item["key_hash"]["S"] for item in self._scan_keys()),
        )  # fmt: skip

    def create(
        self,
        name: str,
        scope: str,
        *,
        view: str | None = None,
        quota: Quota = NO_QUOTA,
        confirm: str | None = None,
        approvers: tuple[str, ...] = (),
    ) -> tuple[KeyRecord, str]:
        """A new key; the secret is returned here and nowhere else, ever. `view` binds it
        to a view; `quota` limits its calls; `confirm` has the user approve its destructive
        (or all not read-only) calls first (all three can change with `bind`)."""
        confirm, approvers = check_confirm(confirm), check_key_approvers(approvers, confirm)
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise InvalidKeyNameError(f"key name must be {NAME_RULE}")
        if scope not in SCOPES:
            raise InvalidScopeError("key scope must be 'call' or 'author'")
        secret = f"kiln_{scope}_{secrets.token_urlsafe(32)}"
        digest = hash_secret(secret)
        created_at = _now_iso(self.now())
        try:
            self.db.transact_write_items(
                TransactItems=[
                    {
                        "Put": {
                            "TableName": self.table,
                            "Item": {
                                "pk": {"S": f"KEYNAME#{name}"},
                                "sk": {"S": "KEYNAME"},
                                "key_hash": {"S": digest},
                            },
                            "ConditionExpression": "attribute_not_exists(pk)",
                        }
                    },
                    {
                        "Put": {
                            "TableName": self.table,
                            "Item": {
                                "pk": {"S": f"KEY#{digest}"},
                                "sk": {"S": "KEY"},
                                "name": {"S": name},
                                "scope": {"S": scope},
                                "key_hash": {"S": digest},
                                "created_at": {"S": created_at},
                                **_binding_attributes(view, quota, confirm, approvers),
                            },
                            "ConditionExpression": "attribute_not_exists(pk)",
                        }
                    },
                    self._directory.put(digest),
                ]
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] == "TransactionCanceledException":
                raise KeyNameTakenError(f"a key named {name!r} already exists") from None
            raise
        record = KeyRecord(name, scope, digest[:12], created_at, view=view, quota=quota)
        return replace(record, confirm=confirm, approvers=approvers), secret

    def bind(
        self,
        name: str,
        *,
        view: str | None,
        quota: Quota,
        confirm: str | None = None,
        approvers: tuple[str, ...] = (),
    ) -> KeyRecord:
        """Set the view, quota and confirm policy of the active key `name` (None / no
        limits: unbound, no approvals).

        This process sees the change at once; others within CACHE_TTL_S, like a revocation.
        """
        confirm = check_confirm(confirm)
        approvers = check_key_approvers(approvers, confirm)
        digest = self._active_digest(name)
        values = _binding_attributes(view, quota, confirm, approvers)
        sets = [f"#{field} = :{field}" for field in values]
        fields = ("view", "quota", "confirm", "approvers")
        removes = [f"#{field}" for field in fields if field not in values]
        expression = " ".join(
            part
            for part in (
                f"SET {', '.join(sets)}" if sets else "",
                f"REMOVE {', '.join(removes)}" if removes else "",
            )
            if part
        )
        names = {f"#{field}": field for field in fields}
        extra: dict[str, Any] = {"ExpressionAttributeNames": names}
        if values:
            extra["ExpressionAttributeValues"] = {f":{k}": v for k, v in values.items()}
        try:
            self.db.update_item(
                TableName=self.table,
                Key={"pk": {"S": f"KEY#{digest}"}, "sk": {"S": "KEY"}},
                UpdateExpression=expression,
                ConditionExpression="attribute_exists(pk) AND attribute_not_exists(revoked_at)",
                **extra,
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] == "ConditionalCheckFailedException":
                raise KeyNotFoundError(f"no active key named {name!r}") from None
            raise
        return self._forget_and_read(digest)

    def list(self) -> list[KeyRecord]:
        """Every key, revoked ones included, oldest first. Never a secret, never a full hash."""
        records = (_record(item) for item in self._directory.items())
        return sorted(records, key=lambda r: (r.created_at, r.name))

    def revoke(self, name: str) -> KeyRecord:
        """Revoke the named key; the name becomes free for a new key."""
        digest = self._active_digest(name)
        revoked_at = _now_iso(self.now())
        try:
            self.db.transact_write_items(
                TransactItems=[
                    {
                        "Update": {
                            "TableName": self.table,
                            "Key": {"pk": {"S": f"KEY#{digest}"}, "sk": {"S": "KEY"}},
                            "UpdateExpression": "SET revoked_at = :at",
                            "ConditionExpression": "attribute_exists(pk)",
                            "ExpressionAttributeValues": {":at": {"S": revoked_at}},
                        }
                    },
                    {
                        "Delete": {
                            "TableName": self.table,
                            "Key": {"pk": {"S": f"KEYNAME#{name}"}, "sk": {"S": "KEYNAME"}},
                            "ConditionExpression": "key_hash = :h",
                            "ExpressionAttributeValues": {":h": {"S": digest}},
                        }
                    },
                ]
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] == "TransactionCanceledException":
                raise KeyNotFoundError(f"no active key named {name!r}") from None
            raise
        return self._forget_and_read(digest)

    def _active_digest(self, name: str) -> str:
        """The hash of the active key called `name` (strongly consistent read)."""
        item = self.db.get_item(
            TableName=self.table,
            Key={"pk": {"S": f"KEYNAME#{name}"}, "sk": {"S": "KEYNAME"}},
            ConsistentRead=True,
        ).get("Item")
        if item is None:
            raise KeyNotFoundError(f"no active key named {name!r}")
        return str(item["key_hash"]["S"])

    def _forget_and_read(self, digest: str) -> KeyRecord:
        """Drop this process's cached lookup of a key just changed, and read it back."""
        with self._lock:
            self._cache.pop(digest, None)
        record = self._read(digest)
        assert record is not None
        return record

    def authenticate(self, secret: str) -> KeyRecord | None:
        """The active key this secret belongs to, or None."""
        if not isinstance(secret, str) or not looks_like_key(secret):
            return None
        digest = hash_secret(secret)
        tick = self.clock()
        with self._lock:
            cached = self._cache.get(digest)
        if (
            cached is not None
            and cached.expires > tick
            and hmac.compare_digest(cached.digest, digest)
        ):
            self._touch(cached, tick)
            return cached.record
        item = self._get(digest)
        if item is None or not hmac.compare_digest(item["key_hash"]["S"], digest):
            return None
        record = _record(item)
        if record.revoked:
            with self._lock:
                self._cache.pop(digest, None)
            return None
        entry = _Cached(
            record,
            digest,
            tick + self.cache_ttl_s,
            cached.last_used_written if cached else float("-inf"),
        )
        with self._lock:
            self._cache[digest] = entry
        self._touch(entry, tick)
        return record

    def _touch(self, entry: _Cached, tick: float) -> None:
        if tick - entry.last_used_written < LAST_USED_EVERY.total_seconds():
            return
        entry.last_used_written = tick
        now = self.now()
        try:
            # The condition keeps many containers from writing the same minute over and over.
            self.db.update_item(
                TableName=self.table,
                Key={"pk": {"S": f"KEY#{entry.digest}"}, "sk": {"S": "KEY"}},
                UpdateExpression="SET last_used_at = :now",
                ConditionExpression=(
                    "attribute_exists(pk) AND "
                    "(attribute_not_exists(last_used_at) OR last_used_at < :before)"
                ),
                ExpressionAttributeValues={
                    ":now": {"S": _now_iso(now)},
                    ":before": {"S": _now_iso(now - LAST_USED_EVERY)},
                },
            )
        except ClientError as exc:
            code = exc.response["Error"]["Code"]
            if code != "ConditionalCheckFailedException" and not self._warned:
                # Bookkeeping only: a role without UpdateItem must not turn into refused keys.
                self._warned = True
                log.warning("could not record a key's last use (%s); keys still work", code)

    def _get(self, digest: str) -> dict[str, Any] | None:
        item: dict[str, Any] | None = self.db.get_item(
            TableName=self.table,
            Key={"pk": {"S": f"KEY#{digest}"}, "sk": {"S": "KEY"}},
            ConsistentRead=True,
        ).get("Item")
        return item

    def _read(self, digest: str) -> KeyRecord | None:
        item = self._get(digest)
        return None if item is None else _record(item)

    def _scan_keys(self) -> Iterator[dict[str, Any]]:
        """Every key item, by a Scan of the whole table: only for a table written before
        keys had a directory (kiln.aws.directory), once."""
        paginator = self.db.get_paginator("scan")
        pages = paginator.paginate(
            TableName=self.table,
            FilterExpression="begins_with(pk, :p) AND sk = :sk",
            ExpressionAttributeValues={":p": {"S": "KEY#"}, ":sk": {"S": "KEY"}},
            ConsistentRead=True,
        )
        for page in pages:
            yield from page.get("Items", [])


def _binding_attributes(
    view: str | None, quota: Quota, confirm: str | None = None, approvers: tuple[str, ...] = ()
) -> dict[str, Any]:
    found: dict[str, Any] = {}
    if view is not None:
        found["view"] = {"S": view}
    if confirm is not None:
        found["confirm"] = {"S": confirm}
    if approvers:
        found["approvers"] = {"L": [{"S": a} for a in approvers]}
    if not quota.empty:
        limits = {k: v for k, v in quota.as_dict().items() if v is not None}
        found["quota"] = {"S": json.dumps(limits, sort_keys=True)}
    return found


def _stored_quota(item: dict[str, Any]) -> Quota:
    try:
        return check_quota(json.loads(item["quota"]["S"])) if "quota" in item else NO_QUOTA
    except ValueError:  # never let a damaged item lift a limit silently: refuse everything
        log.error("key %s has an unreadable quota; it may make no calls", item["name"]["S"])
        return Quota(calls_per_minute=1, run_seconds_per_day=1e-9)


def _record(item: dict[str, Any]) -> KeyRecord:
    def opt(field: str) -> str | None:
        value = item.get(field)
        return None if value is None else str(value["S"])

    scope = item["scope"]["S"]
    if scope not in SCOPES:  # never trust stored data into a permission
        scope = "call"
    return KeyRecord(
        name=item["name"]["S"],
        scope=scope,
        key_id=item["key_hash"]["S"][:12],
        created_at=item["created_at"]["S"],
        last_used_at=opt("last_used_at"),
        revoked_at=opt("revoked_at"),
        view=opt("view"),
        quota=_stored_quota(item),
        # An unreadable stored policy never lifts approvals silently: the strictest one.
        confirm=None if opt("confirm") is None else _stored_confirm(opt("confirm")),
        approvers=tuple(a["S"] for a in item.get("approvers", {}).get("L", [])),
    )


def _stored_confirm(value: str | None) -> str:
    return value if value in CONFIRM_VALUES else "writes"
