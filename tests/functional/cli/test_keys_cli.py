"""`kiln keys …` and `kiln secrets …` as a user runs them: a child process against moto."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import boto3
import pytest

from conftest import AwsStack
from kiln.access.secrets import SecretStore
from kiln.catalog.rules import check_draft
from kiln.catalog.store import CatalogStore
from kiln.identity.keys import KeyStore

FUNCTIONS = str(Path(__file__).resolve().parents[3] / "functions")


@pytest.fixture
def prefix() -> str:
    return f"/kiln-cli-{uuid.uuid4().hex[:8]}"


def kiln(
    aws: AwsStack, *args: str, stdin: str = "", prefix: str = "/kiln", table: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": os.environ.get("PATH", ""),
        "PYTHONPATH": FUNCTIONS,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": aws.endpoint_url,
        "KILN_TABLE": aws.table if table is None else table,
        "KILN_SECRETS_PREFIX": prefix,
    }
    return subprocess.run(
        [sys.executable, "-m", "kiln.cli", *args, "--aws"],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


def test_keys_create_prints_the_key_once_and_ls_never_shows_it(aws: AwsStack) -> None:
    created = kiln(aws, "keys", "create", "--name", "ci", "--scope", "call")
    assert created.returncode == 0, created.stderr
    secret = created.stdout.strip()
    assert secret.startswith("kiln_call_")
    assert "shown only once" in created.stderr
    listed = kiln(aws, "keys", "ls")
    assert listed.returncode == 0, listed.stderr
    assert secret not in listed.stdout + listed.stderr
    assert listed.stdout.splitlines()[1].split()[:2] == ["ci", "call"]
    store = KeyStore(aws.clients.dynamodb, table=aws.table)
    found = store.authenticate(secret)
    assert found is not None
    assert found.name == "ci"


def test_keys_revoke_then_the_key_no_longer_authenticates(aws: AwsStack) -> None:
    secret = kiln(aws, "keys", "create", "--name", "ci", "--scope", "author").stdout.strip()
    revoked = kiln(aws, "keys", "revoke", "ci")
    assert revoked.returncode == 0, revoked.stderr
    assert KeyStore(aws.clients.dynamodb, table=aws.table).authenticate(secret) is None
    again = kiln(aws, "keys", "revoke", "ci")
    assert again.returncode == 1
    assert "no active key named 'ci'" in again.stderr


def test_keys_errors_name_the_problem(aws: AwsStack) -> None:
    bad = kiln(aws, "keys", "create", "--name", "has space", "--scope", "call")
    assert bad.returncode == 1
    assert "key name must be" in bad.stderr
    no_table = kiln(aws, "keys", "ls", table="")
    assert no_table.returncode == 1
    assert "set KILN_TABLE" in no_table.stderr
    wrong_scope = kiln(aws, "keys", "create", "--name", "x", "--scope", "root")
    assert wrong_scope.returncode == 2
    assert "invalid choice: 'root'" in wrong_scope.stderr


def test_secrets_set_reads_stdin_and_ls_shows_names_only(aws: AwsStack, prefix: str) -> None:
    store = CatalogStore(aws.clients.dynamodb, aws.clients.s3, table=aws.table, bucket=aws.bucket)
    tool = store.create(
        check_draft({"name": "weather", "description": "d", "language": "python", "code": "1"})
    )
    value = f"planted-{uuid.uuid4().hex}"
    put = kiln(aws, "secrets", "set", "weather", "API_TOKEN", stdin=value + "\n", prefix=prefix)
    assert put.returncode == 0, put.stderr
    assert value not in put.stdout + put.stderr
    listed = kiln(aws, "secrets", "ls", "weather", prefix=prefix)
    assert listed.stdout.split() == ["API_TOKEN"]
    assert value not in listed.stdout
    ssm = boto3.session.Session(region_name="us-east-1").client(
        "ssm", endpoint_url=aws.endpoint_url
    )
    # Stored under the tool's id, so a rename keeps the secret with its tool.
    assert SecretStore(ssm, prefix).values(tool.id, ["API_TOKEN"]) == {"API_TOKEN": value}
    removed = kiln(aws, "secrets", "rm", "weather", "API_TOKEN", prefix=prefix)
    assert removed.returncode == 0, removed.stderr
    assert kiln(aws, "secrets", "ls", "weather", prefix=prefix).stdout == ""


def test_secrets_refuse_unknown_tools_empty_values_and_argv_values(
    aws: AwsStack, prefix: str
) -> None:
    unknown = kiln(aws, "secrets", "set", "nope", "API_TOKEN", stdin="v", prefix=prefix)
    assert unknown.returncode == 1
    assert "no tool is named 'nope'" in unknown.stderr
    store = CatalogStore(aws.clients.dynamodb, aws.clients.s3, table=aws.table, bucket=aws.bucket)
    store.create(check_draft({"name": "t", "description": "d", "language": "python", "code": "1"}))
    empty = kiln(aws, "secrets", "set", "t", "API_TOKEN", stdin="", prefix=prefix)
    assert empty.returncode == 1
    assert "no secret value given" in empty.stderr
    on_argv = kiln(aws, "secrets", "set", "t", "API_TOKEN", "the-value", prefix=prefix)
    assert on_argv.returncode == 2  # there is no argument for the value, by design
