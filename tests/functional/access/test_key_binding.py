"""A key can be bound to a view and given quotas; the binding travels with authentication."""

from __future__ import annotations

import pytest

from conftest import AwsStack
from kiln.access.quotas import NO_QUOTA, Quota
from kiln.identity.keys import KeyNotFoundError, KeyStore
from kiln.identity.policy import Authenticator


def test_a_bound_key_authenticates_with_its_view_and_quota(aws: AwsStack) -> None:
    keys = KeyStore(aws.clients.dynamodb, table=aws.table)
    _, secret = keys.create("ci", "call", view="finance", quota=Quota(calls_per_minute=50))
    principal = Authenticator(keys=keys).authenticate(
        f"Bearer {secret}", need="call", resource_path="/mcp", base_url="http://127.0.0.1"
    )
    assert principal.view == "finance"
    assert principal.quota == Quota(calls_per_minute=50)
    assert principal.key_id is not None


def test_binding_changes_are_seen_at_once_in_this_process(aws: AwsStack) -> None:
    keys = KeyStore(aws.clients.dynamodb, table=aws.table)
    _, secret = keys.create("ci", "call")
    assert keys.authenticate(secret).view is None  # type: ignore[union-attr]
    keys.bind("ci", view="sales", quota=Quota(run_seconds_per_day=60))
    record = keys.authenticate(secret)
    assert record is not None
    assert (record.view, record.quota) == ("sales", Quota(run_seconds_per_day=60.0))
    keys.bind("ci", view=None, quota=NO_QUOTA)
    record = keys.authenticate(secret)
    assert record is not None
    assert (record.view, record.quota) == (None, NO_QUOTA)
    assert [k.view for k in keys.list()] == [None]


def test_only_an_active_key_can_be_bound(aws: AwsStack) -> None:
    keys = KeyStore(aws.clients.dynamodb, table=aws.table)
    with pytest.raises(KeyNotFoundError):
        keys.bind("ghost", view="v", quota=NO_QUOTA)
    keys.create("old", "call")
    keys.revoke("old")
    with pytest.raises(KeyNotFoundError):
        keys.bind("old", view="v", quota=NO_QUOTA)
