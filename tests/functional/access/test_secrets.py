"""Per-tool secrets in SSM Parameter Store SecureString (moto server over HTTP)."""

from __future__ import annotations

import uuid
from typing import Any

import boto3
import pytest

from kiln.access.secrets import (
    InvalidSecretError,
    MissingSecretsError,
    SecretNotFoundError,
    SecretStore,
    secret_env,
)
from support.leakguard import Planted


class Tick:
    now = 0.0


@pytest.fixture(scope="module")
def ssm(moto_endpoint: str) -> Any:
    # SSM needs no table or bucket; each test gets its own path prefix instead.
    session = boto3.session.Session(region_name="us-east-1")
    return session.client("ssm", endpoint_url=moto_endpoint)


@pytest.fixture
def prefix() -> str:
    return f"/kiln-test-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def tick() -> Tick:
    return Tick()


class PlantingSecretStore(SecretStore):
    """The real store; every value set through it is planted for the session's leak guard."""

    planted: Planted

    def set(self, tool_id: str, name: str, value: str) -> None:
        if len(value) >= 8:
            self.planted.add(value)
        super().set(tool_id, name, value)


@pytest.fixture
def store(ssm: Any, prefix: str, tick: Tick, planted_secrets: Planted) -> SecretStore:
    store = PlantingSecretStore(ssm, prefix, clock=lambda: tick.now)
    store.planted = planted_secrets
    return store


def test_value_is_stored_as_securestring_under_the_tools_path(
    store: SecretStore, ssm: Any, prefix: str
) -> None:
    store.set("tool-1", "API_TOKEN", "s3cr3t-value")
    meta = ssm.get_parameter(Name=f"{prefix}/tool-1/API_TOKEN", WithDecryption=False)
    assert meta["Parameter"]["Type"] == "SecureString"
    assert meta["Parameter"]["Value"] != "s3cr3t-value"


def test_names_lists_only_that_tools_secrets(store: SecretStore) -> None:
    store.set("tool-1", "B_KEY", "b")
    store.set("tool-1", "A_KEY", "a")
    store.set("tool-2", "OTHER", "o")
    assert store.names("tool-1") == ["A_KEY", "B_KEY"]
    assert store.names("tool-3") == []


def test_values_returns_exactly_the_declared_names(store: SecretStore) -> None:
    store.set("tool-1", "A_KEY", "alpha")
    store.set("tool-1", "B_KEY", "beta")
    assert store.values("tool-1", ["A_KEY"]) == {"A_KEY": "alpha"}
    assert store.values("tool-1", []) == {}


def test_a_declared_secret_that_is_not_set_is_named_in_the_error(store: SecretStore) -> None:
    store.set("tool-1", "A_KEY", "alpha")
    with pytest.raises(MissingSecretsError, match="not set: B_KEY") as caught:
        store.values("tool-1", ["A_KEY", "B_KEY"])
    assert "alpha" not in str(caught.value)


def test_values_are_cached_briefly_and_a_set_in_this_process_is_seen_at_once(
    store: SecretStore, ssm: Any, prefix: str, tick: Tick
) -> None:
    store.set("tool-1", "A_KEY", "one")
    assert store.values("tool-1", ["A_KEY"]) == {"A_KEY": "one"}
    ssm.put_parameter(
        Name=f"{prefix}/tool-1/A_KEY", Value="two", Type="SecureString", Overwrite=True
    )  # another process
    assert store.values("tool-1", ["A_KEY"]) == {"A_KEY": "one"}
    tick.now += 31
    assert store.values("tool-1", ["A_KEY"]) == {"A_KEY": "two"}
    store.set("tool-1", "A_KEY", "three")
    assert store.values("tool-1", ["A_KEY"]) == {"A_KEY": "three"}


def test_delete_removes_and_a_second_delete_is_not_found(store: SecretStore) -> None:
    store.set("tool-1", "A_KEY", "alpha")
    store.values("tool-1", ["A_KEY"])
    store.delete("tool-1", "A_KEY")
    assert store.names("tool-1") == []
    with pytest.raises(MissingSecretsError):
        store.values("tool-1", ["A_KEY"])
    with pytest.raises(SecretNotFoundError, match="no secret named A_KEY"):
        store.delete("tool-1", "A_KEY")


def test_delete_all_clears_a_tool(store: SecretStore) -> None:
    store.set("tool-1", "A_KEY", "a")
    store.set("tool-1", "B_KEY", "b")
    store.delete_all("tool-1")
    assert store.names("tool-1") == []


@pytest.mark.parametrize(
    ("name", "rule"),
    [
        ("lower", "capital letters"),
        ("1ABC", "capital letters"),
        ("A-B", "capital letters"),
        ("PATH", "reserved"),
        ("AWS_SECRET_ACCESS_KEY", "reserved"),
        ("KILN_TABLE", "reserved"),
        ("LD_PRELOAD", "reserved"),
        ("PYTHONPATH", "reserved"),
        ("NODE_OPTIONS", "reserved"),
    ],
)
def test_bad_or_reserved_names_are_refused(store: SecretStore, name: str, rule: str) -> None:
    with pytest.raises(InvalidSecretError, match=rule):
        store.set("tool-1", name, "v")


@pytest.mark.parametrize(
    ("value", "rule"),
    [("", "non-empty"), ("x" * 4097, "at most 4096"), ("a\x00b", "NUL")],
)
def test_bad_values_are_refused(store: SecretStore, value: str, rule: str) -> None:
    with pytest.raises(InvalidSecretError, match=rule) as caught:
        store.set("tool-1", "A_KEY", value)
    assert value not in str(caught.value) or not value


@pytest.mark.parametrize("tool_id", ["", "../other", "a/b", "x" * 129])
def test_tool_ids_cannot_escape_their_folder(store: SecretStore, tool_id: str) -> None:
    with pytest.raises(InvalidSecretError, match="tool id must be"):
        store.set(tool_id, "A_KEY", "v")


def test_secret_env_is_empty_for_a_tool_that_declares_none(store: SecretStore) -> None:
    assert secret_env(None, "tool-1", []) == {}
    store.set("tool-1", "A_KEY", "alpha")
    assert secret_env(store, "tool-1", ["A_KEY"]) == {"A_KEY": "alpha"}
    with pytest.raises(MissingSecretsError):
        secret_env(None, "tool-1", ["A_KEY"])
