"""template.yaml, read as data: who may do what to the catalog, and what the storage looks like."""

from __future__ import annotations

import fnmatch
import json
import re
import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from cfnlint.decode import decode
from packaging.requirements import Requirement

from kiln.aws.clients import TABLE_DEFINITION

ROOT = Path(__file__).resolve().parents[3]
TEMPLATE = ROOT / "template.yaml"

READ_ONLY_TABLE_ACTIONS = {
    "dynamodb:GetItem",
    "dynamodb:BatchGetItem",
    "dynamodb:Query",
    "dynamodb:Scan",
    "dynamodb:DescribeTable",
}
READ_ONLY_BUCKET_ACTIONS = {
    "s3:GetObject",
    "s3:GetObjectVersion",
    "s3:GetObjectTagging",
    "s3:ListBucket",
}


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    data, problems = decode(str(TEMPLATE))
    assert not problems, problems
    assert data is not None
    return dict(data)


def resources_of_type(template: Mapping[str, Any], kind: str) -> dict[str, Any]:
    return {k: v for k, v in template["Resources"].items() if v["Type"] == kind}


def the_one(template: Mapping[str, Any], kind: str) -> str:
    (name,) = resources_of_type(template, kind)
    return name


def statements(template: Mapping[str, Any], function: str) -> Iterator[dict[str, Any]]:
    """Every Allow statement of a function's inline policies; anything else fails the test.

    A managed policy or a SAM policy template cannot be read here, so it is refused rather
    than trusted.
    """
    props = template["Resources"][function]["Properties"]
    assert "Role" not in props, f"{function} brings its own role; its rights cannot be read here"
    assert "Policies" not in template.get("Globals", {}).get("Function", {})
    for policy in props.get("Policies", []):
        message = f"{function} has a policy that is not an inline statement list: {policy!r}"
        assert isinstance(policy, Mapping), message
        assert set(policy) <= {"Version", "Statement"}, message
        for statement in policy["Statement"]:
            assert statement["Effect"] == "Allow", statement
            yield statement


def as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list) else [value]


def refers_to(resource: Any, logical_id: str) -> bool:
    text = json.dumps(resource)
    if text.strip('"') == "*":
        return True
    return re.search(rf"\b{re.escape(logical_id)}\b", text) is not None


def actions_on(template: Mapping[str, Any], function: str, logical_id: str) -> set[str]:
    found: set[str] = set()
    for statement in statements(template, function):
        if any(refers_to(r, logical_id) for r in as_list(statement["Resource"])):
            found.update(as_list(statement["Action"]))
    return found


# What the public function may write: quota counters and ledger entries (kiln.access), spent
# approvals (kiln.access.approvals), task records (kiln.tasks), and nothing whose partition key
# could belong to the catalog (tools, views, names, keys).
LEDGER_AND_QUOTA_KEYS = {"LEDGER#*", "LEDGERSUM#*", "QUOTA#*"}
TASK_KEYS = {"TASK#*"}
APPROVAL_KEYS = {"APPROVAL#*"}
IDEMPOTENCY_KEYS = {"IDEM#*"}  # keyed calls' claims and answers (kiln.accounting.idempotency)
VAULT_KEYS = {"CONNECTION#*", "CONNECT#*"}  # a caller's tokens refreshed, a flow begun
CATALOG_PARTITIONS = ["CATALOG", "TOOLS", "TOOL#0a1b", "NAME#add_vat", "VIEWS", "KEY#ab12",
                      "KEYNAME#ci", "BUNDLE#x"]  # fmt: skip


def test_public_function_can_only_read_the_table_without_a_leading_key_condition(
    template: dict[str, Any],
) -> None:
    table = the_one(template, "AWS::DynamoDB::Table")
    unconditioned: set[str] = set()
    for statement in statements(template, "McpFunction"):
        if "Condition" not in statement and any(
            refers_to(r, table) for r in as_list(statement["Resource"])
        ):
            unconditioned.update(as_list(statement["Action"]))
    assert unconditioned, "the public function must be able to read the catalog"
    assert unconditioned <= READ_ONLY_TABLE_ACTIONS, unconditioned - READ_ONLY_TABLE_ACTIONS


def write_patterns(template: Mapping[str, Any], function: str) -> set[str]:
    """The partition-key patterns a function's table writes are confined to.

    Every statement that may write the table must be confined by a leading-keys condition;
    a write without one fails the test.
    """
    table = the_one(template, "AWS::DynamoDB::Table")
    writes = [
        s
        for s in statements(template, function)
        if any(refers_to(r, table) for r in as_list(s["Resource"]))
        and set(as_list(s["Action"])) - READ_ONLY_TABLE_ACTIONS
    ]
    found: set[str] = set()
    for statement in writes:
        allowed = {"dynamodb:PutItem", "dynamodb:UpdateItem"}
        if statement.get("Sid") == "ReadWriteVault":  # a connection dropped, a flow taken out
            allowed.add("dynamodb:DeleteItem")
            assert set(leading_keys(statement)) == VAULT_KEYS, statement
        assert set(as_list(statement["Action"])) <= allowed
        if statement.get("Sid") == "RecordKeyUse":
            assert_only_key_use_is_recorded(statement)
            continue
        # ForAllValues: every partition key the request touches must match a pattern.
        condition = statement["Condition"]
        assert list(condition) == ["ForAllValues:StringLike"], statement
        assert list(condition["ForAllValues:StringLike"]) == ["dynamodb:LeadingKeys"], statement
        patterns = set(condition["ForAllValues:StringLike"]["dynamodb:LeadingKeys"])
        for partition in CATALOG_PARTITIONS:
            assert not any(fnmatch.fnmatchcase(partition, p) for p in patterns), partition
        found |= patterns
    return found


def assert_only_key_use_is_recorded(statement: Mapping[str, Any]) -> None:
    """A key item may be updated in its last_used_at only: not its scopes, not its hash."""
    assert as_list(statement["Action"]) == ["dynamodb:UpdateItem"], statement
    condition = statement["Condition"]
    assert condition["ForAllValues:StringLike"] == {"dynamodb:LeadingKeys": ["KEY#*"]}
    attributes = condition["ForAllValues:StringEquals"]["dynamodb:Attributes"]
    assert set(attributes) == {"pk", "sk", "last_used_at"}, attributes
    assert set(condition) == {"ForAllValues:StringLike", "ForAllValues:StringEquals"}


def test_public_function_writes_only_ledger_quota_task_approval_idempotency_and_vault_items(
    template: dict[str, Any],
) -> None:
    patterns = write_patterns(template, "McpFunction")
    expected = LEDGER_AND_QUOTA_KEYS | TASK_KEYS | APPROVAL_KEYS | IDEMPOTENCY_KEYS | VAULT_KEYS
    assert patterns == expected


def test_the_worker_writes_only_task_ledger_quota_approval_and_vault_items_and_task_results(
    template: dict[str, Any],
) -> None:
    # Ledger and quota items: a task call's entry and its run-seconds charge; approval items:
    # an approved call's approval moved to `running` before it runs (kiln.tasks.approving);
    # vault items: the token of a task's caller refreshed, a flow begun (kiln.connections).
    expected = TASK_KEYS | LEDGER_AND_QUOTA_KEYS | APPROVAL_KEYS | VAULT_KEYS
    assert write_patterns(template, "WorkerFunction") == expected
    bucket = the_one(template, "AWS::S3::Bucket")
    for statement in statements(template, "WorkerFunction"):
        writes = [a for a in as_list(statement["Action"]) if not a.startswith("s3:Get")]
        if any(a.startswith("s3:") for a in writes):
            for resource in as_list(statement["Resource"]):
                assert refers_to(resource, bucket), resource
                assert json.dumps(resource).endswith('/tasks/*"}'), resource


def test_only_the_public_and_admin_functions_may_start_task_runs(
    template: dict[str, Any],
) -> None:
    starters = {"McpFunction", "AdminFunction"}  # MCP tasks, and authors' task runs (REST)
    for function in resources_of_type(template, "AWS::Serverless::Function"):
        invokes = actions_on(template, function, "WorkerFunction")
        assert ("lambda:InvokeFunction" in invokes) == (function in starters), function
    for function in starters:
        props = template["Resources"][function]["Properties"]
        assert props["Environment"]["Variables"]["KILN_WORKER_FUNCTION"] == {
            "Ref": "WorkerFunction"
        }


def test_the_worker_runs_up_to_fifteen_minutes_and_is_never_retried(
    template: dict[str, Any],
) -> None:
    props = template["Resources"]["WorkerFunction"]["Properties"]
    assert props["Timeout"] == 900
    assert props["EventInvokeConfig"]["MaximumRetryAttempts"] == 0
    assert props["ReservedConcurrentExecutions"] == {"Ref": "WorkerConcurrency"}


def test_ledger_entries_and_day_counters_expire_by_ttl(template: dict[str, Any]) -> None:
    props = template["Resources"][the_one(template, "AWS::DynamoDB::Table")]["Properties"]
    assert props["TimeToLiveSpecification"] == {"AttributeName": "expires_at", "Enabled": True}


def test_public_function_can_only_read_the_bucket(template: dict[str, Any]) -> None:
    bucket = the_one(template, "AWS::S3::Bucket")
    actions = actions_on(template, "McpFunction", bucket)
    assert actions, "the public function must be able to read code and bundles"
    assert actions <= READ_ONLY_BUCKET_ACTIONS, actions - READ_ONLY_BUCKET_ACTIONS


def test_public_function_has_no_rights_beyond_the_table_and_the_bucket(
    template: dict[str, Any],
) -> None:
    table = the_one(template, "AWS::DynamoDB::Table")
    bucket = the_one(template, "AWS::S3::Bucket")
    for statement in statements(template, "McpFunction"):
        own_tests = {"ReadToolSecrets", "StartTaskRuns", "SendRunsToTheRunner"}
        if statement.get("Sid") in own_tests | VAULT_SIDS:
            continue  # their own tests
        for resource in as_list(statement["Resource"]):
            assert refers_to(resource, table) or refers_to(resource, bucket), statement


VAULT_SIDS = {"UseVaultKey", "ReadProviderSecrets"}
VAULT_FUNCTIONS = {"McpFunction", "AdminFunction", "WorkerFunction"}


def leading_keys(statement: Mapping[str, Any]) -> list[str]:
    return as_list(statement["Condition"]["ForAllValues:StringLike"]["dynamodb:LeadingKeys"])


def test_only_the_functions_that_run_or_connect_may_use_the_vault_key(
    template: dict[str, Any],
) -> None:
    """mcp and the worker (a task's run) open a run's token and reseal it when refreshed;
    admin serves /connect/callback, which seals the tokens. The builder and the runner (the
    tool's own code) never."""
    for function in resources_of_type(template, "AWS::Serverless::Function"):
        uses = [s for s in statements(template, function) if s.get("Sid") in VAULT_SIDS]
        if function not in VAULT_FUNCTIONS:
            assert not uses, function
            assert not any(
                a.startswith("kms:")
                for s in statements(template, function)
                for a in as_list(s["Action"])
            ), function
            continue
        by_sid = {s["Sid"]: s for s in uses}
        assert set(by_sid) == VAULT_SIDS, function
        key = by_sid["UseVaultKey"]
        assert set(as_list(key["Action"])) == {"kms:GenerateDataKey", "kms:Decrypt"}
        assert key["Resource"] == {"Fn::GetAtt": ["VaultKey", "Arn"]}
        secret = by_sid["ReadProviderSecrets"]
        assert as_list(secret["Action"]) == ["ssm:GetParameter"]
        assert json.dumps(secret["Resource"]).endswith('/_connections/*"}'), secret
        variables = template["Resources"][function]["Properties"]["Environment"]["Variables"]
        assert variables["KILN_VAULT_KMS_KEY"] == {"Fn::GetAtt": ["VaultKey", "Arn"]}
        path = template["Resources"][function]["Properties"]["RolePath"]
        assert path == {"Fn::Sub": "/kiln-${Stage}-vault/"}, function


def test_the_vault_key_policy_lets_the_account_administer_it_and_only_the_vault_roles_use_it(
    template: dict[str, Any],
) -> None:
    key = template["Resources"]["VaultKey"]["Properties"]
    assert key["EnableKeyRotation"] is True
    by_sid = {s["Sid"]: s for s in key["KeyPolicy"]["Statement"]}
    admin = as_list(by_sid["AccountAdministers"]["Action"])
    assert not {"kms:Decrypt", "kms:Encrypt", "kms:GenerateDataKey", "kms:*"} & set(admin)
    use = by_sid["VaultFunctionsUseIt"]
    assert set(as_list(use["Action"])) == {"kms:GenerateDataKey", "kms:Decrypt"}
    arn = use["Condition"]["ArnLike"]["aws:PrincipalArn"]
    assert arn["Fn::Sub"].endswith(":role/kiln-${Stage}-vault/*")


def test_the_connect_pages_are_served_by_the_admin_function(template: dict[str, Any]) -> None:
    routes = {
        name: event["Properties"]["Path"]
        for function in resources_of_type(template, "AWS::Serverless::Function")
        for name, event in template["Resources"][function]["Properties"].get("Events", {}).items()
        if event["Type"] == "HttpApi" and event["Properties"]["Path"].startswith("/connect")
    }
    assert routes == {"Connect": "/connect/{proxy+}"}
    assert "Connect" in template["Resources"]["AdminFunction"]["Properties"]["Events"]


SECRETS_RESOURCE = {
    "Fn::Sub": "arn:${AWS::Partition}:ssm:${AWS::Region}:${AWS::AccountId}"
    ":parameter/kiln/${Stage}/*"
}


def test_the_admin_function_may_set_and_remove_its_stages_tool_secrets(
    template: dict[str, Any],
) -> None:
    (statement,) = [
        s for s in statements(template, "AdminFunction") if s.get("Sid") == "ReadWriteToolSecrets"
    ]
    assert set(as_list(statement["Action"])) == {
        "ssm:GetParametersByPath",
        "ssm:PutParameter",
        "ssm:DeleteParameter",
    }
    assert as_list(statement["Resource"]) == [SECRETS_RESOURCE]


@pytest.mark.parametrize("function", ["McpFunction", "WorkerFunction"])
def test_functions_may_only_read_their_stages_tool_secrets(
    template: dict[str, Any], function: str
) -> None:
    (statement,) = [s for s in statements(template, function) if s.get("Sid") == "ReadToolSecrets"]
    assert as_list(statement["Action"]) == ["ssm:GetParametersByPath"]
    assert as_list(statement["Resource"]) == [SECRETS_RESOURCE]
    variables = template["Globals"]["Function"]["Environment"]["Variables"]
    assert variables["KILN_SECRETS_PREFIX"] == {"Fn::Sub": "/kiln/${Stage}"}


@pytest.mark.parametrize(
    "function",
    ["McpFunction", "AdminFunction", "BuilderFunction", "WorkerFunction", "RunnerFunction"],
)
def test_no_function_has_a_wildcard_action_or_resource(
    template: dict[str, Any], function: str
) -> None:
    for statement in statements(template, function):
        for action in as_list(statement["Action"]):
            assert "*" not in action, f"{function}: wildcard action {action}"
        for resource in as_list(statement["Resource"]):
            assert resource != "*", f"{function}: wildcard resource in {statement}"


def test_only_the_admin_function_may_start_bundle_builds(template: dict[str, Any]) -> None:
    for function in resources_of_type(template, "AWS::Serverless::Function"):
        invokes = actions_on(template, function, "BuilderFunction")
        assert ("lambda:InvokeFunction" in invokes) == (function == "AdminFunction"), function


def test_the_builder_writes_only_bundle_objects(template: dict[str, Any]) -> None:
    for statement in statements(template, "BuilderFunction"):
        if any(a.startswith("s3:Put") for a in as_list(statement["Action"])):
            for resource in as_list(statement["Resource"]):
                assert json.dumps(resource).endswith('/bundles/*"}'), resource


def test_table_definition_equals_the_one_kiln_creates_locally(template: dict[str, Any]) -> None:
    props = template["Resources"][the_one(template, "AWS::DynamoDB::Table")]["Properties"]
    for key, value in TABLE_DEFINITION.items():
        assert json.loads(json.dumps(props[key])) == value, key
    assert "GlobalSecondaryIndexes" not in props
    assert "LocalSecondaryIndexes" not in props


def test_table_has_point_in_time_recovery_and_encryption(template: dict[str, Any]) -> None:
    props = template["Resources"][the_one(template, "AWS::DynamoDB::Table")]["Properties"]
    assert props["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
    assert props["SSESpecification"]["SSEEnabled"] is True


def test_bucket_is_private_versioned_encrypted_and_tls_only(template: dict[str, Any]) -> None:
    bucket = the_one(template, "AWS::S3::Bucket")
    props = template["Resources"][bucket]["Properties"]
    assert set(props["PublicAccessBlockConfiguration"].values()) == {True}
    assert len(props["PublicAccessBlockConfiguration"]) == 4
    assert props["VersioningConfiguration"] == {"Status": "Enabled"}
    assert props["BucketEncryption"]["ServerSideEncryptionConfiguration"]
    rules = {r["Id"]: r for r in props["LifecycleConfiguration"]["Rules"]}
    assert "NoncurrentVersionExpiration" in rules["expire-noncurrent-versions"]
    assert rules["expire-task-results"]["Prefix"] == "tasks/"
    # Nothing tags bundles (no role may): a rule waiting for a tag would be a promise unkept.
    assert not any("TagFilters" in rule for rule in rules.values())
    (policy,) = resources_of_type(template, "AWS::S3::BucketPolicy").values()
    (deny,) = policy["Properties"]["PolicyDocument"]["Statement"]
    assert deny["Effect"] == "Deny"
    assert deny["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}


def test_http_api_is_throttled(template: dict[str, Any]) -> None:
    api = template["Resources"][the_one(template, "AWS::Serverless::HttpApi")]["Properties"]
    settings = api["DefaultRouteSettings"]
    assert {"ThrottlingRateLimit", "ThrottlingBurstLimit"} <= set(settings)


def test_handlers_name_the_entry_points_of_kiln_lambda_handlers(template: dict[str, Any]) -> None:
    source = (ROOT / "functions/kiln/lambda_handlers.py").read_text()
    for name, function in resources_of_type(template, "AWS::Serverless::Function").items():
        module, _, attribute = function["Properties"]["Handler"].rpartition(".")
        assert module == "kiln.lambda_handlers", name
        assert f'"{attribute}":' in source, f"{name}: no entry point {attribute!r}"


def test_deps_layer_pins_every_runtime_dependency_of_the_package() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    lines = (ROOT / "layers/deps/requirements.txt").read_text().splitlines()
    pins = [Requirement(line) for line in lines if line.strip() and not line.startswith("#")]
    pinned = {canonical(r.name) for r in pins}
    for requirement in pins:
        assert str(requirement.specifier).startswith("=="), f"{requirement} is not pinned"
    for dependency in project["dependencies"]:
        assert canonical(Requirement(dependency).name) in pinned, dependency


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_bundle_targets_match_the_runtime_and_the_node_layer(template: dict[str, Any]) -> None:
    globals_ = template["Globals"]["Function"]
    variables = globals_["Environment"]["Variables"]
    runtime = globals_["Runtime"]  # python3.13
    assert variables["KILN_BUNDLE_TARGET"] == {"Fn::Sub": f"lambda-{runtime}-${{Architecture}}"}
    makefile = (ROOT / "layers/node/Makefile").read_text()
    (node_version,) = re.findall(r"^NODE_VERSION \?= (\d+)\.", makefile, re.MULTILINE)
    assert variables["KILN_NODE_BUNDLE_TARGET"] == {
        "Fn::Sub": f"node{node_version}-${{Architecture}}"
    }
    # The deps layer's Makefile fetches wheels for, and compiles with, the runtime's Python.
    deps = (ROOT / "layers/deps/Makefile").read_text()
    version = runtime.removeprefix("python")
    assert f"PYTHON ?= {runtime}\n" in deps
    assert f"--python-version {version}" in deps


def test_the_admin_function_serves_the_studio_beside_the_api(template: dict[str, Any]) -> None:
    events = template["Resources"]["AdminFunction"]["Properties"]["Events"]
    routes = {(e["Properties"]["Path"], e["Properties"]["Method"]) for e in events.values()}
    assert {("/studio", "GET"), ("/studio/{proxy+}", "GET"), ("/api/{proxy+}", "ANY")} <= routes
    public = template["Resources"]["McpFunction"]["Properties"]["Events"]
    assert not any("studio" in e["Properties"]["Path"] for e in public.values())


def test_mcp_admin_and_worker_send_runs_to_the_runner_and_nothing_else_may(
    template: dict[str, Any],
) -> None:
    senders = {"McpFunction", "AdminFunction", "WorkerFunction"}
    for function in resources_of_type(template, "AWS::Serverless::Function"):
        invokes = actions_on(template, function, "RunnerFunction")
        assert ("lambda:InvokeFunction" in invokes) == (function in senders), function
    for function in senders:
        variables = template["Resources"][function]["Properties"]["Environment"]["Variables"]
        assert variables["KILN_RUNNER_FUNCTION"] == {"Ref": "RunnerFunction"}
        assert variables["KILN_RUNNER_TENANT"] == {"Ref": "RunnerTenant"}


def test_the_runner_is_tenant_isolated_and_reads_only_bundle_objects(
    template: dict[str, Any],
) -> None:
    props = template["Resources"]["RunnerFunction"]["Properties"]
    assert props["TenancyConfig"] == {"TenantIsolationMode": "PER_TENANT"}
    assert props["Handler"] == "kiln.lambda_handlers.runner"
    assert "SnapStart" not in props
    assert "ProvisionedConcurrencyConfig" not in props
    assert props["ReservedConcurrentExecutions"] == {"Ref": "RunnerConcurrency"}
    assert props["EphemeralStorage"]["Size"] >= 1024
    assert props["EventInvokeConfig"]["MaximumRetryAttempts"] == 0
    (statement,) = statements(template, "RunnerFunction")
    assert as_list(statement["Action"]) == ["s3:GetObject"]
    (resource,) = as_list(statement["Resource"])
    assert json.dumps(resource).endswith('/bundles/*"}'), resource


# ---------------------------------------------------------------- the front door (issue 25)

TOOL_RUNNERS = ("McpFunction", "AdminFunction", "WorkerFunction")


def function_setting(template: Mapping[str, Any], function: str, name: str) -> Any:
    """A property of a function, or the Globals' value when the function does not set it."""
    props = template["Resources"][function]["Properties"]
    return props.get(name, template["Globals"]["Function"].get(name))


def parameter_default(template: Mapping[str, Any], value: Any) -> Any:
    if isinstance(value, dict) and "Ref" in value:
        return template["Parameters"][value["Ref"]]["Default"]
    return value


def test_the_public_function_has_reserved_concurrency(template: dict[str, Any]) -> None:
    props = template["Resources"]["McpFunction"]["Properties"]
    reserved = parameter_default(template, props["ReservedConcurrentExecutions"])
    assert 1 <= int(reserved) <= 900, reserved  # accounts keep 100 of their 1,000 unreserved


def test_no_function_url_is_open_to_anyone(template: dict[str, Any]) -> None:
    # Nothing in AWS throttles a Function URL: with AuthType NONE it bypasses the HTTP API.
    for name, function in resources_of_type(template, "AWS::Serverless::Function").items():
        url = function["Properties"].get("FunctionUrlConfig")
        assert url is None or url.get("AuthType") == "AWS_IAM", name
    assert not resources_of_type(template, "AWS::Lambda::Url")


def test_a_tool_run_gets_less_memory_than_the_function_that_runs_it(
    template: dict[str, Any],
) -> None:
    variables = template["Globals"]["Function"]["Environment"]["Variables"]
    run_mb = int(variables["KILN_RUN_MEMORY_MB"])
    # A function that sends its runs to the runner function runs no tool itself.
    in_process = [
        function
        for function in TOOL_RUNNERS
        if "KILN_RUNNER_FUNCTION" not in own_variables(template, function)
    ]
    for function in ["RunnerFunction", *in_process]:
        memory = int(function_setting(template, function, "MemorySize"))
        assert run_mb + 192 <= memory, f"{function}: {run_mb} MB runs in {memory} MB"


def own_variables(template: Mapping[str, Any], function: str) -> Mapping[str, Any]:
    props = template["Resources"][function]["Properties"]
    return props.get("Environment", {}).get("Variables", {})


def test_the_call_path_logs_no_lambda_lines_per_invocation_but_its_failures(
    template: dict[str, Any],
) -> None:
    """START/END/REPORT are INFO system logs: dropped (README "Cost and scale")."""
    level = template["Globals"]["Function"]["Environment"]["Variables"]["POWERTOOLS_LOG_LEVEL"]
    for function in ("McpFunction", "RunnerFunction"):
        logging = template["Resources"][function]["Properties"]["LoggingConfig"]
        assert logging["LogFormat"] == "JSON", function
        assert logging["SystemLogLevel"] == "WARN", function  # failures and timeouts are WARN
        # Powertools warns on every start when Lambda's level and its own differ.
        assert logging["ApplicationLogLevel"] == level, function


def test_tmp_holds_the_bundle_cache_and_a_runs_disk_quota(template: dict[str, Any]) -> None:
    from kiln.bundles.cache import DEFAULT_BUDGET_BYTES
    from kiln.settings import Settings

    needed_mb = DEFAULT_BUDGET_BYTES // 2**20 + Settings().run_disk_quota_mb + 128
    for function in TOOL_RUNNERS:
        size = function_setting(template, function, "EphemeralStorage")["Size"]
        assert size >= needed_mb, f"{function}: /tmp of {size} MB, needs {needed_mb}"


def test_a_plain_tool_may_not_outlast_the_front_door(template: dict[str, Any]) -> None:
    from kiln.catalog.rules import MAX_PLAIN_TIMEOUT_SECONDS

    assert MAX_PLAIN_TIMEOUT_SECONDS <= 30  # API Gateway's HTTP API: 30 s per request
    assert int(function_setting(template, "McpFunction", "Timeout")) >= MAX_PLAIN_TIMEOUT_SECONDS


def test_a_task_event_waits_as_long_as_its_task_waits_for_a_worker(
    template: dict[str, Any],
) -> None:
    from kiln.tasks.settings import TaskSettings

    props = template["Resources"]["WorkerFunction"]["Properties"]
    assert props["EventInvokeConfig"]["MaximumEventAgeInSeconds"] == TaskSettings().start_grace_s
    concurrency = parameter_default(template, props["ReservedConcurrentExecutions"])
    assert int(concurrency) >= TaskSettings().max_running_per_principal
