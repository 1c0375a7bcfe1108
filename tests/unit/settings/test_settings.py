"""Settings: every variable Kiln reads, its default, and the error a bad value gets."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kiln.settings import LOCAL_URL, Settings, SettingsError
from kiln.tasks.settings import TaskSettings

# variable -> (field, a value to set, what the field then holds)
VARIABLES: dict[str, tuple[str, str, Any]] = {
    "KILN_TABLE": ("table", "tools", "tools"),
    "KILN_BUCKET": ("bucket", "code", "code"),
    "AWS_REGION": ("region", "eu-west-1", "eu-west-1"),
    "AWS_ENDPOINT_URL": ("endpoint_url", "http://127.0.0.1:5000/", "http://127.0.0.1:5000"),
    "AWS_PROFILE": ("profile", "dev", "dev"),
    "KILN_AUTHOR_KEY": ("author_key", "k-123", "k-123"),
    "KILN_URL": ("url", "https://kiln.example/", "https://kiln.example"),
    "KILN_PUBLIC_ANONYMOUS": ("public_anonymous", "no", False),
    "KILN_ALLOWED_ORIGINS": ("allowed_origins", "https://a.example, https://b.example", (
        "https://a.example", "https://b.example")),
    "KILN_BIND_HOST": ("bind_host", "127.0.0.1", "127.0.0.1"),
    "KILN_BIND_PORT": ("bind_port", "8000", 8000),
    "KILN_INSTRUCTIONS": ("instructions", "Be brief.", "Be brief."),
    "KILN_CATALOG_MODE": ("catalog_mode", "search", "search"),
    "KILN_MAX_BODY_BYTES": ("max_body_bytes", "2048", 2048),
    "KILN_MAX_TIMEOUT_S": ("max_timeout_s", "60", 60.0),
    "KILN_LOCAL_TIME_BUDGET_S": ("local_time_budget_s", "12.5", 12.5),
    "KILN_CATALOG_MAX_STALENESS_S": ("catalog_max_staleness_s", "1", 1.0),
    "KILN_RUN_MEMORY_MB": ("run_memory_mb", "768", 768),
    "KILN_MAX_CONCURRENT_RUNS": ("max_concurrent_runs", "2", 2),
    "KILN_MAX_RUN_QUEUE": ("max_run_queue", "0", 0),
    "KILN_MAX_CONNECTIONS": ("max_connections", "64", 64),
    "KILN_IDLE_TIMEOUT_S": ("idle_timeout_s", "2.5", 2.5),
    "KILN_REQUEST_TIMEOUT_S": ("request_timeout_s", "30", 30.0),
    "KILN_NODE_BINARY": ("node_binary", "/opt/node", "/opt/node"),
    "KILN_RUN_UIDS": ("run_uids", "70000-70009", (70000, 70010)),
    "KILN_RUN_DISK_QUOTA_MB": ("run_disk_quota_mb", "64", 64),
    "KILN_SWEEP_SHARED_TEMP": ("sweep_shared_temp", "yes", True),
    "KILN_SWEEP_PATIENCE_S": ("sweep_patience_s", "0", 0.0),
    "KILN_RUN_SHARED_DIRS": ("run_shared_dirs", "/a,/b", ("/a", "/b")),
    "KILN_RUN_UNIX_SOCKETS": ("run_unix_sockets", "true", True),
    "KILN_RUN_TCP_PORTS": ("run_tcp_ports", "443,80", (80, 443)),
    "KILN_SERIALIZE_SHARED_UID_RUNS": ("serialize_shared_uid_runs", "no", False),
    "KILN_RUN_STANDBY": ("run_standby", "0", 0),
    "KILN_NPM": ("npm", "/opt/npm", "/opt/npm"),
    "KILN_BUNDLE_TARGET": ("bundle_target", "lambda-python3.13-x86_64", "lambda-python3.13-x86_64"),
    "KILN_NODE_BUNDLE_TARGET": ("node_bundle_target", "node20-x86_64", "node20-x86_64"),
    "KILN_BUILDER_FUNCTION": ("builder_function", "builder", "builder"),
    "KILN_RUNNER_FUNCTION": ("runner_function", "runner", "runner"),
    "KILN_RUNNER_TENANT": ("runner_tenant", "author", "author"),
    "KILN_RUNNER_ENDPOINT_URL": ("runner_endpoint_url", "http://127.0.0.1:9", "http://127.0.0.1:9"),
    "KILN_WARM_ON_SAVE": ("warm_on_save", "false", False),
    "KILN_BUNDLE_CACHE_DIR": ("bundle_cache_dir", "/tmp/b", Path("/tmp/b")),
    "KILN_BUNDLE_CACHE_MB": ("bundle_cache_mb", "512", 512.0),
    "KILN_BUNDLE_MAX_UNPACKED_MB": ("bundle_max_unpacked_mb", "100", 100.0),
    "KILN_BUNDLE_INSTALLER": ("bundle_installer", "pip", "pip"),
    "KILN_UV": ("uv", "/opt/bin/uv", "/opt/bin/uv"),
    "KILN_BUN": ("bun", "/opt/bin/bun", "/opt/bin/bun"),
    "KILN_BUILD_CACHE_DIR": ("build_cache_dir", "/tmp/c", Path("/tmp/c")),
    "KILN_BUILD_CACHE_MB": ("build_cache_mb", "512", 512.0),
    "KILN_PUBLIC_BASE_URL": ("public_base_url", "https://kiln.example/", "https://kiln.example"),
    "KILN_VAULT_KMS_KEY": ("vault_kms_key", "alias/kiln-vault", "alias/kiln-vault"),
    "KILN_VAULT_KEY_FILE": ("vault_key_file", "/tmp/v.key", Path("/tmp/v.key")),
    "KILN_CURSOR_SECRET": ("cursor_secret", "s3cret", "s3cret"),
    "KILN_STATE_SECRET": ("state_secret", "st4te", "st4te"),
    "KILN_LEDGER": ("ledger", "off", False),
    "KILN_LEDGER_RETENTION_DAYS": ("ledger_retention_days", "90", 90),
    "KILN_LEDGER_DIGEST_KEY": ("ledger_digest_key", "d1gest", "d1gest"),
    "KILN_LEDGER_SHARDS": ("ledger_shards", "64", 64),
    "KILN_LEDGER_TOTALS_FLUSH_S": ("ledger_totals_flush_s", "2.5", 2.5),
    "KILN_QUOTA_CLAIM_HORIZON_S": ("quota_claim_horizon_s", "50", 50.0),
    "KILN_CALL_DEPTH": ("call_depth", "2", 2),
    "KILN_CALL_COUNT": ("call_count", "5", 5),
    "KILN_CALL_SECONDS": ("call_seconds", "7.5", 7.5),
    "KILN_IDEMPOTENCY_WINDOW_S": ("idempotency_window_s", "3600", 3600.0),
    "KILN_IDEMPOTENCY_MAX_ANSWER_BYTES": ("idempotency_max_answer_bytes", "1000", 1000),
    "KILN_IDEMPOTENCY_WAIT_S": ("idempotency_wait_s", "0", 0.0),
    "KILN_METRICS_FLUSH_S": ("metrics_flush_s", "0", 0.0),
    "AWS_LAMBDA_FUNCTION_NAME": ("in_lambda", "kiln-mcp", True),
    "AWS_LAMBDA_RUNTIME_API": ("runtime_api", "127.0.0.1:9001", "127.0.0.1:9001"),
    "_HANDLER": ("lambda_handler", "kiln.lambda_handlers.runner", "kiln.lambda_handlers.runner"),
    "PYENV_ROOT": ("pyenv_root", "/opt/pyenv", "/opt/pyenv"),
    "POWERTOOLS_SERVICE_NAME": ("service_name", "kiln-prod", "kiln-prod"),
    "POWERTOOLS_METRICS_NAMESPACE": ("metrics_namespace", "KilnProd", "KilnProd"),
    "KILN_TRACING": ("tracing", "on", True),
}  # fmt: skip

DEFAULTS: dict[str, Any] = {
    "table": "kiln",
    "bucket": "kiln-local",
    "region": None,
    "endpoint_url": None,
    "profile": None,
    "author_key": None,
    "url": LOCAL_URL,
    "public_anonymous": True,
    "allowed_origins": (),
    "bind_host": None,
    "bind_port": None,
    "instructions": None,
    "catalog_mode": "list",
    "max_body_bytes": 1024 * 1024,
    "max_timeout_s": 900.0,
    "local_time_budget_s": 60.0,
    "catalog_max_staleness_s": 0.0,
    "run_memory_mb": 1024,
    "max_concurrent_runs": 4,
    "max_run_queue": 32,
    "max_connections": 1000,
    "idle_timeout_s": 5.0,
    "request_timeout_s": 10.0,
    "node_binary": None,
    "run_uids": (60000, 61000),
    "run_disk_quota_mb": 256,
    "sweep_shared_temp": False,
    "sweep_patience_s": 5.0,
    "run_shared_dirs": (),
    "run_unix_sockets": False,
    "run_tcp_ports": "auto",
    "serialize_shared_uid_runs": True,
    "run_standby": 4,
    "npm": None,
    "bundle_target": None,
    "node_bundle_target": None,
    "builder_function": None,
    "runner_function": None,
    "runner_tenant": "tool",
    "runner_endpoint_url": None,
    "warm_on_save": True,
    "bundle_cache_dir": None,
    "bundle_cache_mb": None,
    "bundle_max_unpacked_mb": None,
    "bundle_installer": "auto",
    "uv": None,
    "bun": None,
    "build_cache_dir": None,
    "build_cache_mb": None,
    "public_base_url": None,
    "vault_kms_key": None,
    "vault_key_file": None,
    "cursor_secret": None,
    "state_secret": None,
    "ledger": True,
    "ledger_retention_days": 30,
    "ledger_digest_key": None,
    "ledger_shards": None,
    "ledger_totals_flush_s": 10.0,
    "quota_claim_horizon_s": 1.0,
    "call_depth": 4,
    "call_count": 32,
    "call_seconds": 60.0,
    "idempotency_window_s": 86_400.0,
    "idempotency_max_answer_bytes": 65_536,
    "idempotency_wait_s": 5.0,
    "metrics_flush_s": 10.0,
    "in_lambda": False,
    "runtime_api": None,
    "lambda_handler": "",
    "pyenv_root": None,
    "service_name": "kiln",
    "metrics_namespace": "Kiln",
    "tracing": False,
}

BAD_VALUES = {
    "KILN_CATALOG_MODE": ("browse", 'expected "list"'),
    "KILN_PUBLIC_ANONYMOUS": ("maybe", "expected true or false"),
    "KILN_TRACING": ("sometimes", "expected true or false"),
    "KILN_LEDGER": ("perhaps", "expected true or false"),
    "KILN_LEDGER_RETENTION_DAYS": ("0", "must be at least 1"),
    "KILN_LEDGER_SHARDS": ("0", "must be at least 1"),
    "KILN_MAX_BODY_BYTES": ("1MB", "expected a whole number"),
    "KILN_MAX_CONCURRENT_RUNS": ("0", "must be at least 1"),
    "KILN_MAX_RUN_QUEUE": ("-1", "must not be negative"),
    "KILN_RUN_STANDBY": ("-2", "must not be negative"),
    "KILN_MAX_CONNECTIONS": ("many", "expected a whole number"),
    "KILN_RUN_UIDS": ("0-10", "must be a range above 0"),
    "KILN_SWEEP_SHARED_TEMP": ("maybe", "expected true or false"),
    "KILN_SWEEP_PATIENCE_S": ("-1", "must be a positive number"),
    "KILN_IDLE_TIMEOUT_S": ("0", "must be a positive number"),
    "KILN_MAX_TIMEOUT_S": ("soon", "expected a number"),
    "KILN_LOCAL_TIME_BUDGET_S": ("-5", "must be a positive number"),
    "KILN_CATALOG_MAX_STALENESS_S": ("-1", "must be a positive number"),
    "KILN_METRICS_FLUSH_S": ("-1", "must be a positive number"),
    "KILN_RUN_MEMORY_MB": ("0", "must be at least 1"),
    "KILN_BUILD_CACHE_MB": ("-5", "must be a positive number"),
    "KILN_BUNDLE_CACHE_MB": ("lots", "expected a number"),
    "KILN_BUNDLE_MAX_UNPACKED_MB": ("0", "must be a positive number"),
    "KILN_BUNDLE_INSTALLER": ("poetry", "expected auto, uv or pip"),
    "KILN_URL": ("kiln.example", "must be an http(s) URL"),
    "AWS_ENDPOINT_URL": ("localhost:5000", "must be an http(s) URL"),
    "KILN_PUBLIC_BASE_URL": ("kiln.example", "must be an http(s) URL"),
    "KILN_OAUTH_ISSUER": ("login.example", "must be an http(s) URL"),
    "KILN_SECRETS_PREFIX": ("kiln/", "must start with '/'"),
    "KILN_RUNNER_TENANT": ("caller", 'expected "tool"'),
    "KILN_IDEMPOTENCY_WINDOW_S": ("0", "must be a positive number"),
    "KILN_IDEMPOTENCY_MAX_ANSWER_BYTES": ("400000", "must be at most 350000"),
    "KILN_IDEMPOTENCY_WAIT_S": ("-1", "must be a positive number"),
}


def test_with_nothing_set_every_field_has_its_default() -> None:
    settings = Settings.from_env({})
    assert {name: getattr(settings, name) for name in DEFAULTS} == DEFAULTS
    assert settings == Settings()


def test_every_field_but_the_nested_ones_is_covered_by_the_tables_here() -> None:
    fields = set(Settings.__dataclass_fields__) - {"auth", "tasks", "given"}
    assert fields == set(DEFAULTS) == {field for field, _, _ in VARIABLES.values()}


@pytest.mark.parametrize("variable", sorted(VARIABLES))
def test_each_variable_sets_its_field(variable: str) -> None:
    field, value, expected = VARIABLES[variable]
    settings = Settings.from_env({variable: value})
    assert getattr(settings, field) == expected
    assert variable in settings.given


@pytest.mark.parametrize("variable", sorted(VARIABLES))
def test_a_blank_variable_counts_as_unset(variable: str) -> None:
    field, _, _ = VARIABLES[variable]
    assert getattr(Settings.from_env({variable: "  "}), field) == DEFAULTS[field]


@pytest.mark.parametrize("variable", sorted(BAD_VALUES))
def test_a_bad_value_is_refused_naming_the_variable_and_the_rule(variable: str) -> None:
    value, rule = BAD_VALUES[variable]
    with pytest.raises(SettingsError) as caught:
        Settings.from_env({variable: value, "KILN_OAUTH_AUDIENCE": "https://kiln.example"})
    assert str(caught.value).startswith(variable)
    assert rule in str(caught.value)


def test_aws_region_wins_over_the_default_region() -> None:
    both = {"AWS_REGION": "eu-west-1", "AWS_DEFAULT_REGION": "us-east-2"}
    assert Settings.from_env(both).region == "eu-west-1"
    assert Settings.from_env({"AWS_DEFAULT_REGION": "us-east-2"}).region == "us-east-2"


def test_oauth_settings_are_read_into_the_auth_part() -> None:
    settings = Settings.from_env(
        {
            "KILN_OAUTH_ISSUER": "https://login.example/",
            "KILN_OAUTH_JWKS_URL": "https://login.example/jwks",
            "KILN_OAUTH_AUDIENCE": "https://a.example, https://b.example/",
            "KILN_OAUTH_CALL_SCOPE": "tools:call",
            "KILN_OAUTH_AUTHOR_SCOPE": "tools:write",
            "KILN_SECRETS_PREFIX": "/prod/kiln",
        }
    )
    auth = settings.auth
    assert auth.oauth_issuer == "https://login.example/"  # compared with `iss` exactly
    assert auth.oauth_jwks_url == "https://login.example/jwks"
    assert auth.oauth_audiences == ("https://a.example", "https://b.example")
    assert (auth.scopes.call, auth.scopes.author) == ("tools:call", "tools:write")
    assert auth.secrets_prefix == "/prod/kiln"


def test_an_oauth_issuer_without_an_audience_is_refused() -> None:
    with pytest.raises(SettingsError, match="KILN_OAUTH_ISSUER needs KILN_PUBLIC_BASE_URL"):
        Settings.from_env({"KILN_OAUTH_ISSUER": "https://login.example"})


TASK_VARIABLES: dict[str, tuple[str, str, Any]] = {
    "KILN_TASK_TTL_MS": ("ttl_ms", "60000", 60000),
    "KILN_TASK_POLL_INTERVAL_MS": ("poll_interval_ms", "250", 250),
    "KILN_TASK_HEARTBEAT_S": ("heartbeat_s", "2", 2.0),
    "KILN_TASK_LEASE_S": ("lease_s", "20", 20.0),
    "KILN_TASK_START_GRACE_S": ("start_grace_s", "10", 10.0),
    "KILN_MAX_TASKS_PER_CALLER": ("max_running_per_principal", "3", 3),
    "KILN_MAX_RUNNING_TASKS": ("max_running_per_process", "7", 7),
    "KILN_WORKER_FUNCTION": ("worker_function", "kiln-worker", "kiln-worker"),
}


@pytest.mark.parametrize("variable", sorted(TASK_VARIABLES))
def test_each_task_variable_sets_its_task_setting(variable: str) -> None:
    field, value, expected = TASK_VARIABLES[variable]
    assert getattr(Settings.from_env({variable: value}).tasks, field) == expected
    assert getattr(Settings.from_env({}).tasks, field) == getattr(TaskSettings(), field)


def test_a_task_lease_no_longer_than_the_heartbeat_is_refused_naming_both() -> None:
    with pytest.raises(SettingsError, match=r"KILN_TASK_LEASE_S / KILN_TASK_HEARTBEAT_S"):
        Settings.from_env({"KILN_TASK_LEASE_S": "2", "KILN_TASK_HEARTBEAT_S": "5"})
    with pytest.raises(SettingsError, match=r"^KILN_TASK_TTL_MS: must be at least 1"):
        Settings.from_env({"KILN_TASK_TTL_MS": "0"})


def test_run_uids_can_be_turned_off_and_lambda_sweeps_shared_temp_by_default() -> None:
    assert Settings.from_env({"KILN_RUN_UIDS": "off"}).run_uids is None
    assert Settings.from_env({"AWS_LAMBDA_FUNCTION_NAME": "kiln-mcp"}).sweep_shared_temp
    lambda_off = {"AWS_LAMBDA_FUNCTION_NAME": "kiln-mcp", "KILN_SWEEP_SHARED_TEMP": "off"}
    assert not Settings.from_env(lambda_off).sweep_shared_temp


def test_each_room_gets_its_own_settings_from_the_variables() -> None:
    settings = Settings.from_env(
        {
            "KILN_MAX_BODY_BYTES": "2048",
            "KILN_BIND_HOST": "127.0.0.1",
            "KILN_ALLOWED_ORIGINS": "https://a.example, https://b.example",
            "KILN_BUILDER_FUNCTION": "kiln-dev-builder",
            "KILN_BUNDLE_CACHE_MB": "50",
            "KILN_UV": "/opt/bin/uv",
            "KILN_TABLE": "t",
        }
    )
    api, bundles = settings.api, settings.bundles
    assert (api.max_body_bytes, api.loopback_bind) == (2048, True)
    assert api.allowed_origins == ("https://a.example", "https://b.example")
    assert (bundles.table, bundles.builder_function) == ("t", "kiln-dev-builder")
    assert (bundles.bundle_cache_mb, bundles.uv, bundles.in_lambda) == (50.0, "/opt/bin/uv", False)
    assert Settings.from_env({}).api.loopback_bind is False
