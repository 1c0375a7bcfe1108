"""API keys against DynamoDB (moto server over HTTP)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from conftest import AwsStack
from kiln.identity.keys import (
    InvalidKeyNameError,
    InvalidScopeError,
    KeyNameTakenError,
    KeyNotFoundError,
    KeyRecord,
    KeyStore,
    hash_secret,
)
from support.leakguard import Planted


class Clock:
    def __init__(self) -> None:
        self.tick = 1000.0
        self.wall = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)

    def advance(self, seconds: float) -> None:
        self.tick += seconds
        self.wall += timedelta(seconds=seconds)


@pytest.fixture
def clock() -> Clock:
    return Clock()


class PlantingKeyStore(KeyStore):
    """The real store; every secret it hands out is planted for the session's leak guard."""

    planted: Planted

    def create(self, name: str, scope: str) -> tuple[KeyRecord, str]:
        record, secret = super().create(name, scope)
        self.planted.add(secret)
        return record, secret


@pytest.fixture
def store(aws: AwsStack, clock: Clock, planted_secrets: Planted) -> KeyStore:
    store = PlantingKeyStore(
        aws.clients.dynamodb, table=aws.table, clock=lambda: clock.tick, now=lambda: clock.wall
    )
    store.planted = planted_secrets
    return store


def _items(aws: AwsStack) -> list[dict[str, object]]:
    return aws.clients.dynamodb.scan(TableName=aws.table)["Items"]  # type: ignore[no-any-return]


def test_created_key_is_shown_once_and_only_its_hash_is_stored(
    aws: AwsStack, store: KeyStore
) -> None:
    record, secret = store.create("ci", "call")
    assert secret.startswith("kiln_call_")
    assert len(secret) == len("kiln_call_") + 43
    assert record.key_id == hash_secret(secret)[:12]
    stored = repr(_items(aws))
    assert secret not in stored
    assert secret.removeprefix("kiln_call_") not in stored
    assert f"KEY#{hash_secret(secret)}" in stored


def test_secret_authenticates_to_its_record(store: KeyStore) -> None:
    record, secret = store.create("alice", "author")
    found = store.authenticate(secret)
    assert found is not None
    assert (found.name, found.scope, found.key_id) == ("alice", "author", record.key_id)


def test_unknown_and_malformed_secrets_do_not_authenticate(store: KeyStore) -> None:
    _, secret = store.create("alice", "call")
    flipped = secret[:-1] + ("A" if secret[-1] != "A" else "B")
    assert store.authenticate(flipped) is None
    assert store.authenticate("kiln_call_short") is None
    assert store.authenticate("") is None
    assert store.authenticate(secret.replace("kiln_call_", "kiln_author_")) is None


def test_names_are_unique(store: KeyStore) -> None:
    store.create("ci", "call")
    with pytest.raises(KeyNameTakenError, match="'ci' already exists"):
        store.create("ci", "author")


@pytest.mark.parametrize("name", ["", "-lead", "has space", "x" * 65, "slash/no", "ünï"])
def test_bad_names_are_refused_naming_the_rule(store: KeyStore, name: str) -> None:
    with pytest.raises(InvalidKeyNameError, match="1-64 characters"):
        store.create(name, "call")


def test_bad_scope_is_refused(store: KeyStore) -> None:
    with pytest.raises(InvalidScopeError, match="'call' or 'author'"):
        store.create("ci", "admin")


def test_list_shows_names_scopes_and_short_ids_but_no_secret(store: KeyStore) -> None:
    _, first = store.create("a", "call")
    _, second = store.create("b", "author")
    listed = store.list()
    assert [(r.name, r.scope) for r in listed] == [("a", "call"), ("b", "author")]
    assert all(len(r.key_id) == 12 for r in listed)
    assert first not in repr(listed)
    assert second not in repr(listed)
    assert hash_secret(first) not in repr(listed)


def test_revoked_key_stops_working_at_once_in_this_process(store: KeyStore) -> None:
    _, secret = store.create("ci", "call")
    assert store.authenticate(secret) is not None  # now cached
    store.revoke("ci")
    assert store.authenticate(secret) is None
    (record,) = store.list()
    assert record.revoked_at is not None


def test_key_revoked_elsewhere_stops_working_within_the_cache_ttl(
    aws: AwsStack, store: KeyStore, clock: Clock
) -> None:
    _, secret = store.create("ci", "call")
    assert store.authenticate(secret) is not None
    KeyStore(aws.clients.dynamodb, table=aws.table).revoke("ci")  # e.g. the CLI
    clock.advance(14)
    assert store.authenticate(secret) is not None  # still inside the 15 s TTL
    clock.advance(2)
    assert store.authenticate(secret) is None


def test_revoking_frees_the_name_and_unknown_names_are_not_found(
    store: KeyStore, clock: Clock
) -> None:
    _, old = store.create("ci", "call")
    store.revoke("ci")
    clock.advance(1)
    with pytest.raises(KeyNotFoundError, match="no active key named 'ci'"):
        store.revoke("ci")
    _, new = store.create("ci", "author")
    assert store.authenticate(old) is None
    found = store.authenticate(new)
    assert found is not None
    assert found.scope == "author"
    assert [r.revoked for r in store.list()] == [True, False]


def test_last_used_is_written_at_most_once_a_minute(store: KeyStore, clock: Clock) -> None:
    _, secret = store.create("ci", "call")
    assert store.list()[0].last_used_at is None
    store.authenticate(secret)
    first = store.list()[0].last_used_at
    assert first == "2026-11-29T12:00:00Z"
    clock.advance(30)
    store.authenticate(secret)
    assert store.list()[0].last_used_at == first
    clock.advance(31)
    store.authenticate(secret)
    assert store.list()[0].last_used_at == "2026-11-29T12:01:01Z"


def test_other_process_does_not_rewrite_last_used_within_the_minute(
    aws: AwsStack, store: KeyStore, clock: Clock
) -> None:
    _, secret = store.create("ci", "call")
    store.authenticate(secret)
    later = clock.wall + timedelta(seconds=20)
    other = KeyStore(aws.clients.dynamodb, table=aws.table, now=lambda: later)
    assert other.authenticate(secret) is not None
    assert store.list()[0].last_used_at == "2026-11-29T12:00:00Z"


def test_listing_keys_reads_their_directory_never_the_whole_table(
    store: KeyStore, aws: AwsStack
) -> None:
    """The table holds the call ledger too: a Scan per listing grew with every call made."""
    store.create("first", "call")
    store.list()  # a table from before directories is completed once (one Scan) here
    scans: list[object] = []
    aws.clients.dynamodb.meta.events.register(
        "before-call.dynamodb.Scan", lambda **_: scans.append(1)
    )
    store.create("second", "author")
    assert [r.name for r in store.list()] == ["first", "second"]
    assert scans == []


def test_a_key_written_before_the_directory_existed_is_still_listed(
    store: KeyStore, aws: AwsStack
) -> None:
    digest = "ab" * 32
    marker = {"pk": {"S": "DIR#keys"}, "sk": {"S": "#complete"}}
    aws.clients.dynamodb.delete_item(TableName=aws.table, Key=marker)  # a table from before
    aws.clients.dynamodb.put_item(
        TableName=aws.table,
        Item={"pk": {"S": f"KEY#{digest}"}, "sk": {"S": "KEY"}, "name": {"S": "old"},
              "scope": {"S": "call"}, "key_hash": {"S": digest},
              "created_at": {"S": "2026-01-01T00:00:00Z"}},
    )  # fmt: skip
    store.create("new", "call")
    assert [r.name for r in store.list()] == ["old", "new"]
    assert [r.name for r in store.list()] == ["old", "new"]  # and from the directory after
