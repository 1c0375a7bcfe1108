"""The IAM role check itself (tests/iam_roles.py): it refuses what template.yaml does not grant.

Every test that uses the emulator is checked by the `iam_check` fixture; these tests show the
check can fail, on records shaped as the emulator's call log writes them, and that the log
names the role a call was made as.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import pytest

from conftest import AwsStack
from kiln.aws.clients import CALLER_ROLE, make_clients
from support.iam_roles import (
    RoleCheck,
    Simulator,
    bucket_policy,
    load_template,
    read_new,
    role_arns,
    role_policies,
    vault_key_policy,
)


@pytest.fixture(scope="module")
def simulator() -> Iterator[Simulator]:
    running = Simulator()
    yield running
    running.close()


def check(simulator: Simulator, template: dict[str, Any] | None = None) -> RoleCheck:
    template = template or load_template()
    return RoleCheck(
        simulator,
        role_policies(template),
        bucket_policy(template),
        vault_key_policy(template),
        role_arns(template),
    )


def dynamodb(role: str, operation: str, body: dict[str, Any]) -> dict[str, Any]:
    return {"role": role, "service": "dynamodb", "method": "POST", "path": "/", "query": "",
            "target": operation, "status": 200, "body": {"TableName": "t", **body}}  # fmt: skip


def s3(role: str, method: str, key: str, status: int = 200, query: str = "") -> dict[str, Any]:
    return {"role": role, "service": "s3", "method": method, "path": f"/b/{key}",
            "query": query, "target": "", "status": status}  # fmt: skip


def key(pk: str) -> dict[str, Any]:
    return {"Key": {"pk": {"S": pk}, "sk": {"S": "x"}}}


def test_the_public_function_may_write_a_ledger_entry_but_not_a_tool(
    simulator: Simulator,
) -> None:
    ledger = dynamodb("mcp", "PutItem", {"Item": {"pk": {"S": "LEDGER#2026-12-01"}}})
    tool = dynamodb("mcp", "PutItem", {"Item": {"pk": {"S": "TOOL#abc"}}})
    assert check(simulator).refusals([ledger]) == []
    (refusal,) = check(simulator).refusals([tool])
    assert "role mcp: ImplicitlyDenied dynamodb:PutItem" in refusal
    assert "TOOL#abc" in refusal


def test_a_key_may_be_stamped_with_its_last_use_and_nothing_else(simulator: Simulator) -> None:
    stamp = {**key("KEY#ab"), "UpdateExpression": "SET last_used_at = :now"}
    widen = {**key("KEY#ab"), "UpdateExpression": "SET scopes = :all"}
    assert check(simulator).refusals([dynamodb("mcp", "UpdateItem", stamp)]) == []
    (refusal,) = check(simulator).refusals([dynamodb("mcp", "UpdateItem", widen)])
    assert "dynamodb:Attributes" in refusal


def kms(role: str, operation: str) -> dict[str, Any]:
    return {"role": role, "service": "kms", "method": "POST", "path": "/", "query": "",
            "target": operation, "status": 200, "body": {"KeyId": "k"}}  # fmt: skip


def ssm(role: str, operation: str, name: str) -> dict[str, Any]:
    return {"role": role, "service": "ssm", "method": "POST", "path": "/", "query": "",
            "target": operation, "status": 200, "body": {"Name": name}}  # fmt: skip


VAULT_READS = [
    kms("{role}", "Decrypt"),
    kms("{role}", "GenerateDataKey"),
    dynamodb("{role}", "GetItem", key("CONNECTION#key:k1")),
    dynamodb("{role}", "PutItem", {"Item": {"pk": {"S": "CONNECTION#key:k1"}}}),
    dynamodb("{role}", "DeleteItem", key("CONNECTION#key:k1")),
    dynamodb("{role}", "PutItem", {"Item": {"pk": {"S": "CONNECT#state"}}}),
    ssm("{role}", "GetParameter", "/kiln/_connections/github/client_secret"),
]


def as_role(records: list[dict[str, Any]], role: str) -> list[dict[str, Any]]:
    return [{**record, "role": role} for record in records]


@pytest.mark.parametrize("role", ["mcp", "admin", "worker"])
def test_the_functions_that_run_or_connect_may_open_and_reseal_the_vault(
    simulator: Simulator, role: str
) -> None:
    assert check(simulator).refusals(as_role(VAULT_READS, role)) == []


@pytest.mark.parametrize("role", ["runner", "builder"])
def test_the_runner_and_other_functions_cannot_open_the_vault(
    simulator: Simulator, role: str
) -> None:
    # The builder reads the table (GetItem); the vault's records stay sealed to it.
    records = [r for r in VAULT_READS if role == "runner" or r["target"] != "GetItem"]
    for record in as_role(records, role):
        assert len(check(simulator).refusals([record])) == 1, record
    assert any("kms:Decrypt" in r for r in check(simulator).refusals(as_role(records, role)))


def test_the_builder_may_write_bundle_records_and_step_the_catalog_version_only(
    simulator: Simulator,
) -> None:
    bundle = dynamodb("builder", "UpdateItem", {**key("BUNDLE#x"), "UpdateExpression": "SET a=:a"})
    catalog = dynamodb("builder", "UpdateItem", {**key("CATALOG"), "UpdateExpression": "SET a=:a"})
    assert check(simulator).refusals([bundle]) == []
    assert len(check(simulator).refusals([catalog])) == 1
    # A bundle turning ready is a catalog write (bundles/announce.py): the version step and its
    # change-log entry, in one transaction with the bundle's own update; nothing else.
    step = {"Update": {**key("CATALOG"), "UpdateExpression": "SET version = :next"}}
    entry = {"Put": {"Item": {"pk": {"S": "CATALOG#CHANGES"}, "sk": {"S": "000000000007"}}}}
    ready = {"Update": {**key("BUNDLE#x"), "UpdateExpression": "SET a=:a"}}
    announced = dynamodb("builder", "TransactWriteItems", {"TransactItems": [ready, step, entry]})
    assert check(simulator).refusals([announced]) == []
    tool = {"Update": {**key("TOOLS"), "UpdateExpression": "SET head = :h"}}
    sneaked = dynamodb("builder", "TransactWriteItems", {"TransactItems": [tool, step, entry]})
    assert len(check(simulator).refusals([sneaked])) == 1


def test_removing_a_grant_from_the_template_makes_the_call_it_covered_fail(
    simulator: Simulator,
) -> None:
    save_file = s3("admin", "PUT", "files/0a1b")
    assert check(simulator).refusals([save_file]) == []
    template = copy.deepcopy(load_template())
    for statement in template["Resources"]["AdminFunction"]["Properties"]["Policies"][0][
        "Statement"
    ]:
        if statement.get("Sid") == "ReadWriteCode":
            statement["Resource"] = [r for r in statement["Resource"] if "files/" not in str(r)]
    (refusal,) = check(simulator, template).refusals([save_file])
    assert "role admin: ImplicitlyDenied s3:PutObject" in refusal
    assert "/files/0a1b" in refusal


def test_a_missing_object_needs_list_bucket_to_be_a_404(simulator: Simulator) -> None:
    missing = s3("worker", "GET", "bundles/x.manifest.json", status=404)
    (refusal,) = check(simulator).refusals([missing])
    assert "s3:ListBucket" in refusal
    assert "answered 404" in refusal
    assert check(simulator).refusals([s3("admin", "GET", "bundles/x.zip", status=404)]) == []


def test_a_call_made_as_no_function_of_the_template_is_refused(simulator: Simulator) -> None:
    (refusal,) = check(simulator).refusals([s3("janitor", "GET", "code/x")])
    assert "janitor: no function of that name" in refusal


def test_the_emulator_logs_each_call_with_the_role_it_was_made_as(
    aws: AwsStack, tmp_path_factory: pytest.TempPathFactory
) -> None:
    from support.iam_roles import _state

    path = _state["log"]
    start = path.stat().st_size
    token = CALLER_ROLE.set("admin")
    try:
        aws.clients.s3.put_object(Bucket=aws.bucket, Key="code/x.py", Body=b"print(1)")
    finally:
        CALLER_ROLE.reset(token)
    as_worker = make_clients(
        endpoint_url=aws.endpoint_url,
        region="us-east-1",
        credentials=("testing", "testing", "kiln-role/worker"),
    )
    as_worker.dynamodb.get_item(TableName=aws.table, **key("CATALOG"))
    records, _ = read_new(path, start)
    roles = [(r["role"], r["service"], r["target"] or r["method"]) for r in records]
    assert ("admin", "s3", "PUT") in roles, json.dumps(records)
    assert ("worker", "dynamodb", "GetItem") in roles, json.dumps(records)


def test_the_vault_key_policy_refuses_a_role_outside_the_vault_path_even_with_a_grant(
    simulator: Simulator,
) -> None:
    """Granting the runner kms:Decrypt in its own policy is not enough: the key's policy lets
    only roles under /kiln-<stage>-vault/ use it."""
    template = copy.deepcopy(load_template())
    runner = template["Resources"]["RunnerFunction"]["Properties"]
    runner.setdefault("Policies", []).append(
        {
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Action": "kms:*", "Resource": "*"}],
        }
    )
    (refusal,) = check(simulator, template).refusals([kms("runner", "Decrypt")])
    assert "role runner: ImplicitlyDenied kms:Decrypt" in refusal
    runner["RolePath"] = {"Fn::Sub": "/kiln-${Stage}-vault/"}
    assert check(simulator, template).refusals([kms("runner", "Decrypt")]) == []
