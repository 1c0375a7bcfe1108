"""Every environment variable Kiln reads, read here once, typed, and passed down.

This is the only module that looks at the process environment. Entry points call
`Settings.from_env()` (see `kiln.stack`); everything below them receives a `Settings` (or
the few fields it needs) as arguments. A bad value raises `SettingsError` naming the
variable and the rule, so a deployment with a typo fails at start with a clear message.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

from kiln.api.settings import ApiSettings
from kiln.bundles.settings import BundleSettings
from kiln.identity.settings import AuthSettings, AuthSettingsError, check_audience
from kiln.runner.ceiling import LAMBDA_MAX_TIMEOUT_S
from kiln.tasks.settings import TaskSettings

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
LOCAL_URL = "http://127.0.0.1:8000"  # where `kiln dev` serves by default
T = TypeVar("T")
_OURS = ("KILN_", "AWS_", "POWERTOOLS_", "PYENV_ROOT", "_HANDLER")  # what `given` records


class SettingsError(ValueError):
    """A variable holds a value Kiln cannot use; the message names the variable and rule."""


def _parse(env: Mapping[str, str], name: str, default: T, parse: Callable[[str], T]) -> T:
    value = env.get(name)
    if value is None or value.strip() == "":
        return default
    try:
        return parse(value.strip())
    except ValueError as error:
        raise SettingsError(f"{name}: {error}") from None


def _boolean(value: str) -> bool:
    lowered = value.lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off"}:
        return False
    raise ValueError("expected true or false (1/0, yes/no, on/off)")


def _whole_number(minimum: int) -> Callable[[str], int]:
    def parse(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            raise ValueError("expected a whole number, e.g. 4") from None
        if number < minimum:
            raise ValueError("must be at least 1" if minimum == 1 else "must not be negative")
        return number

    return parse


_positive_int = _whole_number(1)
_non_negative_int = _whole_number(0)


def _positive_float(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise ValueError("expected a number, e.g. 60") from None
    if not number > 0 or number == float("inf"):
        raise ValueError("must be a positive number")
    return number


def _non_negative_float(value: str) -> float:
    number = 0.0 if value.strip() == "0" else _positive_float(value)
    return number


def _scale_settings(e: Mapping[str, str]) -> dict[str, Any]:
    """The settings that bound what one container reads and what one run may hold."""
    staleness = Settings.catalog_max_staleness_s
    return {
        "catalog_max_staleness_s": _parse(
            e, "KILN_CATALOG_MAX_STALENESS_S", staleness, _non_negative_float
        ),
        "run_memory_mb": _parse(e, "KILN_RUN_MEMORY_MB", Settings.run_memory_mb, _positive_int),
        "ledger_shards": _parse(e, "KILN_LEDGER_SHARDS", Settings.ledger_shards, _positive_int),
        "ledger_totals_flush_s": _parse(
            e, "KILN_LEDGER_TOTALS_FLUSH_S", Settings.ledger_totals_flush_s, _positive_float
        ),
        "quota_claim_horizon_s": _parse(
            e, "KILN_QUOTA_CLAIM_HORIZON_S", Settings.quota_claim_horizon_s, _positive_float
        ),
        "call_depth": _parse(e, "KILN_CALL_DEPTH", Settings.call_depth, _positive_int),
        "call_count": _parse(e, "KILN_CALL_COUNT", Settings.call_count, _positive_int),
        "call_seconds": _parse(e, "KILN_CALL_SECONDS", Settings.call_seconds, _positive_float),
        "metrics_flush_s": _parse(
            e, "KILN_METRICS_FLUSH_S", Settings.metrics_flush_s, _non_negative_float
        ),
    }


def _answer_cap(value: str) -> int:
    number = _positive_int(value)
    if number > 350_000:  # a DynamoDB item holds 400 KB, the key's other fields included
        raise ValueError("must be at most 350000 (a DynamoDB item holds 400 KB)")
    return number


def _idempotency_settings(e: Mapping[str, str]) -> dict[str, Any]:
    """How long a call's idempotency key answers for it, how much of the answer is kept, and
    how long a call waits for the same key's running call (kiln.accounting.idempotency)."""
    cap = Settings.idempotency_max_answer_bytes
    return {
        "idempotency_window_s": _parse(
            e, "KILN_IDEMPOTENCY_WINDOW_S", Settings.idempotency_window_s, _positive_float
        ),
        "idempotency_max_answer_bytes": _parse(
            e, "KILN_IDEMPOTENCY_MAX_ANSWER_BYTES", cap, _answer_cap
        ),
        "idempotency_wait_s": _parse(
            e, "KILN_IDEMPOTENCY_WAIT_S", Settings.idempotency_wait_s, _non_negative_float
        ),
    }


def _uid_range(value: str) -> tuple[int, int] | None:
    """ "FIRST-LAST" (inclusive) as (FIRST, LAST + 1), or "off"."""
    if value.lower() == "off":
        return None
    first, _, last = value.partition("-")
    try:
        low, high = int(first), int(last)
    except ValueError:
        raise ValueError("must be FIRST-LAST (such as 60000-60999) or off") from None
    if not 0 < low <= high:
        raise ValueError("must be a range above 0 (root), FIRST no more than LAST")
    return low, high + 1


def _tcp_ports(value: str) -> tuple[int, ...] | str:
    """ "all", "auto", or ports and ranges: "80,443,8000-8099"."""
    if value.lower() in {"all", "auto"}:
        return value.lower()
    ports: set[int] = set()
    rule = "must be all, auto, or TCP ports and ranges such as 80,443,8000-8099 (1-65535)"
    for item in _list(value):
        first, _, last = item.partition("-")
        try:
            low, high = int(first), int(last or first)
        except ValueError:
            raise ValueError(rule) from None
        if not 0 < low <= high < 65536:
            raise ValueError(rule)
        ports.update(range(low, high + 1))
    if not ports:
        raise ValueError(rule)
    return tuple(sorted(ports))


def _text(value: str) -> str:
    return value


def _builder_settings(e: Mapping[str, str]) -> dict[str, Any]:
    """How bundles are built here (kiln.bundles.build.Toolchain)."""
    return {
        "bundle_installer": _parse(e, "KILN_BUNDLE_INSTALLER", "auto", _installer),
        "uv": _parse(e, "KILN_UV", None, _text),
        "bun": _parse(e, "KILN_BUN", None, _text),
        "build_cache_dir": _parse(e, "KILN_BUILD_CACHE_DIR", None, Path),
        "build_cache_mb": _parse(e, "KILN_BUILD_CACHE_MB", None, _positive_float),
    }


def _installer(value: str) -> str:
    if value not in ("auto", "uv", "pip"):
        raise ValueError("expected auto, uv or pip")
    return value


def _list(value: str) -> tuple[str, ...]:
    return tuple(item.strip() for item in value.split(",") if item.strip())


def _url(value: str) -> str:
    if not value.startswith(("https://", "http://")):
        raise ValueError("must be an http(s) URL")
    return value.rstrip("/")


def _tenant_mode(value: str) -> str:
    if value not in ("tool", "author"):
        raise ValueError('expected "tool" (each tool its own environments) or "author"')
    return value


def _catalog_mode(value: str) -> str:
    if value not in ("list", "search", "code"):
        raise ValueError(
            'expected "list" (tools/list shows every tool), "search" (search_tools, '
            'describe_tools and call_tool stand in for them) or "code" (search_tools, '
            "describe_tools and execute, which runs code that calls them)"
        )
    return value


def _task_settings(e: Mapping[str, str]) -> TaskSettings:
    d = TaskSettings()
    try:
        return TaskSettings(
            ttl_ms=_parse(e, "KILN_TASK_TTL_MS", d.ttl_ms, _positive_int),
            poll_interval_ms=_parse(
                e, "KILN_TASK_POLL_INTERVAL_MS", d.poll_interval_ms, _positive_int
            ),
            heartbeat_s=_parse(e, "KILN_TASK_HEARTBEAT_S", d.heartbeat_s, _positive_float),
            lease_s=_parse(e, "KILN_TASK_LEASE_S", d.lease_s, _positive_float),
            start_grace_s=_parse(e, "KILN_TASK_START_GRACE_S", d.start_grace_s, _positive_float),
            max_running_per_principal=_parse(
                e, "KILN_MAX_TASKS_PER_CALLER", d.max_running_per_principal, _positive_int
            ),
            max_running_per_process=_parse(
                e, "KILN_MAX_RUNNING_TASKS", d.max_running_per_process, _positive_int
            ),
            worker_function=_parse(e, "KILN_WORKER_FUNCTION", None, _text),
            approval_expiry_s=_parse(
                e, "KILN_APPROVAL_EXPIRY_S", d.approval_expiry_s, _positive_float
            ),
            approval_webhook_url=_parse(e, "KILN_APPROVAL_WEBHOOK_URL", None, _url),
            approval_webhook_secret=_parse(e, "KILN_APPROVAL_WEBHOOK_SECRET", None, _text),
        )
    except ValueError as error:  # a rule across variables (lease longer than heartbeat)
        if isinstance(error, SettingsError):
            raise
        if "webhook" in str(error):
            raise SettingsError(f"KILN_APPROVAL_WEBHOOK_*: {error}") from None
        raise SettingsError(f"KILN_TASK_LEASE_S / KILN_TASK_HEARTBEAT_S: {error}") from None


@dataclass(frozen=True)
class Settings:
    """The whole configuration of one Kiln process (variable names in the comments)."""

    table: str = "kiln"  # KILN_TABLE
    bucket: str = "kiln-local"  # KILN_BUCKET
    region: str | None = None  # AWS_REGION, else AWS_DEFAULT_REGION
    endpoint_url: str | None = None  # AWS_ENDPOINT_URL: moto server, DynamoDB Local, ...
    profile: str | None = None  # AWS_PROFILE
    author_key: str | None = None  # KILN_AUTHOR_KEY: a static author key (and the CLI's key)
    url: str = LOCAL_URL  # KILN_URL: the server the CLI talks to
    public_anonymous: bool = True  # KILN_PUBLIC_ANONYMOUS: /mcp answers without a key
    allowed_origins: tuple[str, ...] = ()  # KILN_ALLOWED_ORIGINS, comma-separated
    bind_host: str | None = None  # KILN_BIND_HOST (set by `kiln dev`): loopback -> Host checks
    bind_port: int | None = None  # KILN_BIND_PORT (set by `kiln dev`): kept from runs' TCP
    instructions: str | None = None  # KILN_INSTRUCTIONS: the MCP `instructions` text
    # KILN_CATALOG_MODE: how /mcp lists the root catalog, "list" or "search" (a view says its
    # own `mode`); see kiln.protocol.discovery
    catalog_mode: str = "list"
    max_body_bytes: int = 1024 * 1024  # KILN_MAX_BODY_BYTES
    max_timeout_s: float = LAMBDA_MAX_TIMEOUT_S  # KILN_MAX_TIMEOUT_S: no run lasts longer
    local_time_budget_s: float = 60.0  # KILN_LOCAL_TIME_BUDGET_S: "time left" outside Lambda
    # KILN_CATALOG_MAX_STALENESS_S: a container reuses a catalog version read this long (0:
    # every request reads it); see kiln.catalog.snapshot.
    catalog_max_staleness_s: float = 0.0
    max_concurrent_runs: int = 4  # KILN_MAX_CONCURRENT_RUNS
    max_run_queue: int = 32  # KILN_MAX_RUN_QUEUE
    max_connections: int = 1000  # KILN_MAX_CONNECTIONS: kiln dev (lowered to fit the fd limit)
    idle_timeout_s: float = 5.0  # KILN_IDLE_TIMEOUT_S: kiln dev, a connection with no request
    request_timeout_s: float = 10.0  # KILN_REQUEST_TIMEOUT_S: kiln dev, first byte to last
    node_binary: str | None = None  # KILN_NODE_BINARY: runs Node tools, and npm beside it
    # Containment of tool runs (README: "What isolates one tool from another").
    run_uids: tuple[int, int] | None = (60000, 61000)  # KILN_RUN_UIDS=60000-60999, or "off"
    run_disk_quota_mb: int = 256  # KILN_RUN_DISK_QUOTA_MB
    # KILN_RUN_MEMORY_MB: a run's memory limit (per process); in Lambda below the function's
    # memory, so that a hungry tool fails alone and the runtime keeps the difference.
    run_memory_mb: int = 1024
    sweep_shared_temp: bool = False  # KILN_SWEEP_SHARED_TEMP (default: on inside Lambda)
    # KILN_SWEEP_PATIENCE_S: how long the runner function keeps killing what a run left
    # before it ends its environment instead (0: end it whenever a run leaves a process)
    sweep_patience_s: float = 5.0
    run_shared_dirs: tuple[str, ...] = ()  # KILN_RUN_SHARED_DIRS: every run may use these
    run_unix_sockets: bool = False  # KILN_RUN_UNIX_SOCKETS: runs may make unix sockets
    # KILN_RUN_TCP_PORTS: where runs may connect ("all"; "auto": common ports when the
    # store is a local emulator, else all; or "80,443,8000-8099"), see process.run_tcp_ports.
    run_tcp_ports: tuple[int, ...] | str = "auto"
    # KILN_SERIALIZE_SHARED_UID_RUNS: runs sharing one uid (no root) go one at a time unless
    # this is turned off (trusted tools only).
    serialize_shared_uid_runs: bool = True
    # KILN_RUN_STANDBY: how many recently called tools keep a prepared run waiting, so
    # that their next call starts at once (0: none); see kiln.runner.standby.
    run_standby: int = 4
    npm: str | None = None  # KILN_NPM: the npm that builds Node bundles
    bundle_target: str | None = None  # KILN_BUNDLE_TARGET: Python bundles' target
    node_bundle_target: str | None = None  # KILN_NODE_BUNDLE_TARGET
    builder_function: str | None = None  # KILN_BUILDER_FUNCTION: the Lambda that builds
    # KILN_RUNNER_FUNCTION: the tenant-isolated Lambda every run is sent to (none: runs here);
    # KILN_RUNNER_TENANT: its tenant id is the tool ("tool") or the tool's author ("author").
    runner_function: str | None = None
    runner_tenant: str = "tool"
    runner_endpoint_url: str | None = None  # KILN_RUNNER_ENDPOINT_URL: a local Invoke stand-in
    # KILN_WARM_ON_SAVE: a save on Lambda starts the tool's runner environment (one
    # asynchronous invoke that runs nothing), so its first call finds it ready
    warm_on_save: bool = True
    bundle_cache_dir: Path | None = None  # KILN_BUNDLE_CACHE_DIR: unpacked bundles
    bundle_cache_mb: float | None = None  # KILN_BUNDLE_CACHE_MB: their disk budget
    bundle_max_unpacked_mb: float | None = None  # KILN_BUNDLE_MAX_UNPACKED_MB
    bundle_installer: str = "auto"  # KILN_BUNDLE_INSTALLER: uv, pip, or auto (uv if installed)
    uv: str | None = None  # KILN_UV: the uv binary that builds Python bundles
    bun: str | None = None  # KILN_BUN: the Bun that builds Node bundles (else PATH's, else npm)
    # KILN_BUILD_CACHE_DIR: packages kept across builds (kiln dev: <state dir>/build-cache;
    # Lambda: /tmp/kiln-build-cache; elsewhere uv's own cache)
    build_cache_dir: Path | None = None
    build_cache_mb: float | None = None  # KILN_BUILD_CACHE_MB: its disk budget (2,048)
    public_base_url: str | None = None  # KILN_PUBLIC_BASE_URL: how clients reach this server
    # The connections vault's key (kiln.connections.envelope): KILN_VAULT_KMS_KEY (AWS, a KMS
    # key id or ARN), else KILN_VAULT_KEY_FILE (kiln dev: <state dir>/vault.key); neither:
    # tools declaring connections cannot run here
    vault_kms_key: str | None = None
    vault_key_file: Path | None = None
    cursor_secret: str | None = None  # KILN_CURSOR_SECRET: signs tools/list cursors
    # KILN_STATE_SECRET: seals a tool call's requestState (2026-07-28 questions); unset: a
    # random secret per process, so a state opens only in the process that sealed it
    state_secret: str | None = None
    ledger: bool = True  # KILN_LEDGER: record every tools/call (kiln.accounting.ledger)
    ledger_retention_days: int = 30  # KILN_LEDGER_RETENTION_DAYS
    ledger_digest_key: str | None = None  # KILN_LEDGER_DIGEST_KEY: HMAC key of argument digests
    # KILN_LEDGER_SHARDS: partitions of a day's entries; unset: 32, and 1 against kiln dev's
    # emulator, which has no per-partition limit (each day records its count: see
    # kiln.accounting.ledger_shards)
    ledger_shards: int | None = None
    ledger_totals_flush_s: float = 10.0  # KILN_LEDGER_TOTALS_FLUSH_S: a process's totals write
    quota_claim_horizon_s: float = 1.0  # KILN_QUOTA_CLAIM_HORIZON_S: a claim's share of own rate
    # Tools that call tools (kiln.protocol.inner): how deep calls nest (KILN_CALL_DEPTH), how
    # many inner calls one call makes in all (KILN_CALL_COUNT), and how long they may take from
    # the first (KILN_CALL_SECONDS)
    call_depth: int = 4
    call_count: int = 32
    call_seconds: float = 60.0
    # Idempotent calls (kiln.accounting.idempotency): a key answers for its call this long
    # (KILN_IDEMPOTENCY_WINDOW_S, 24 h), answers up to this size are kept (bigger ones are
    # not: KILN_IDEMPOTENCY_MAX_ANSWER_BYTES), and a call waits this long for the same key's
    # running call before it is answered `in_progress` (KILN_IDEMPOTENCY_WAIT_S)
    idempotency_window_s: float = 86_400.0
    idempotency_max_answer_bytes: int = 65_536
    idempotency_wait_s: float = 5.0
    in_lambda: bool = False  # AWS_LAMBDA_FUNCTION_NAME is set: running inside Lambda
    # AWS_LAMBDA_RUNTIME_API: where Lambda hands this environment its invocations (the runner
    # function answers there itself when it must end its environment after a run)
    runtime_api: str | None = None
    lambda_handler: str = ""  # _HANDLER: the handler Lambda runs here (kiln.lambda_handlers.runner)
    pyenv_root: str | None = None  # PYENV_ROOT: where builds look for other Pythons
    service_name: str = "kiln"  # POWERTOOLS_SERVICE_NAME
    metrics_namespace: str = "Kiln"  # POWERTOOLS_METRICS_NAMESPACE
    tracing: bool = False  # KILN_TRACING: X-Ray traces through Powertools
    metrics_flush_s: float = 10.0  # KILN_METRICS_FLUSH_S: EMF metrics at most this often (0: each)
    auth: AuthSettings = field(default_factory=AuthSettings)  # KILN_OAUTH_*, KILN_SECRETS_PREFIX
    tasks: TaskSettings = field(default_factory=TaskSettings)  # KILN_TASK_*: long-running tools
    given: frozenset[str] = frozenset()  # the variables that were set (not left to defaults)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Read every setting from `env` (default: the process environment)."""
        e = os.environ if env is None else env
        cache_dir = _parse(e, "KILN_BUNDLE_CACHE_DIR", None, Path)
        in_lambda = bool(_parse(e, "AWS_LAMBDA_FUNCTION_NAME", None, _text))
        public_base_url = _parse(e, "KILN_PUBLIC_BASE_URL", None, _url)
        try:
            auth = AuthSettings.from_env(e)
            check_audience(auth, public_base_url)
        except AuthSettingsError as error:
            raise SettingsError(str(error)) from None
        return cls(
            table=_parse(e, "KILN_TABLE", cls.table, _text),
            bucket=_parse(e, "KILN_BUCKET", cls.bucket, _text),
            region=_parse(e, "AWS_REGION", None, _text)
            or _parse(e, "AWS_DEFAULT_REGION", None, _text),
            endpoint_url=_parse(e, "AWS_ENDPOINT_URL", None, _url),
            profile=_parse(e, "AWS_PROFILE", None, _text),
            author_key=_parse(e, "KILN_AUTHOR_KEY", None, _text),
            url=_parse(e, "KILN_URL", cls.url, _url),
            public_anonymous=_parse(e, "KILN_PUBLIC_ANONYMOUS", cls.public_anonymous, _boolean),
            allowed_origins=_parse(e, "KILN_ALLOWED_ORIGINS", (), _list),
            bind_host=_parse(e, "KILN_BIND_HOST", None, _text),
            bind_port=_parse(e, "KILN_BIND_PORT", None, _positive_int),
            instructions=_parse(e, "KILN_INSTRUCTIONS", None, _text),
            catalog_mode=_parse(e, "KILN_CATALOG_MODE", cls.catalog_mode, _catalog_mode),
            max_body_bytes=_parse(e, "KILN_MAX_BODY_BYTES", cls.max_body_bytes, _positive_int),
            max_timeout_s=_parse(e, "KILN_MAX_TIMEOUT_S", cls.max_timeout_s, _positive_float),
            local_time_budget_s=_parse(
                e, "KILN_LOCAL_TIME_BUDGET_S", cls.local_time_budget_s, _positive_float
            ),
            **_scale_settings(e),
            **_idempotency_settings(e),
            max_concurrent_runs=_parse(
                e, "KILN_MAX_CONCURRENT_RUNS", cls.max_concurrent_runs, _positive_int
            ),
            max_run_queue=_parse(e, "KILN_MAX_RUN_QUEUE", cls.max_run_queue, _non_negative_int),
            max_connections=_parse(e, "KILN_MAX_CONNECTIONS", cls.max_connections, _positive_int),
            idle_timeout_s=_parse(e, "KILN_IDLE_TIMEOUT_S", cls.idle_timeout_s, _positive_float),
            request_timeout_s=_parse(
                e, "KILN_REQUEST_TIMEOUT_S", cls.request_timeout_s, _positive_float
            ),
            node_binary=_parse(e, "KILN_NODE_BINARY", None, _text),
            run_uids=_parse(e, "KILN_RUN_UIDS", cls.run_uids, _uid_range),
            run_disk_quota_mb=_parse(
                e, "KILN_RUN_DISK_QUOTA_MB", cls.run_disk_quota_mb, _non_negative_int
            ),
            sweep_shared_temp=_parse(e, "KILN_SWEEP_SHARED_TEMP", in_lambda, _boolean),
            sweep_patience_s=_parse(
                e, "KILN_SWEEP_PATIENCE_S", cls.sweep_patience_s, _non_negative_float
            ),
            run_shared_dirs=_parse(e, "KILN_RUN_SHARED_DIRS", (), _list),
            run_unix_sockets=_parse(e, "KILN_RUN_UNIX_SOCKETS", False, _boolean),
            run_tcp_ports=_parse(e, "KILN_RUN_TCP_PORTS", cls.run_tcp_ports, _tcp_ports),
            serialize_shared_uid_runs=_parse(
                e, "KILN_SERIALIZE_SHARED_UID_RUNS", cls.serialize_shared_uid_runs, _boolean
            ),
            run_standby=_parse(e, "KILN_RUN_STANDBY", cls.run_standby, _non_negative_int),
            npm=_parse(e, "KILN_NPM", None, _text),
            bundle_target=_parse(e, "KILN_BUNDLE_TARGET", None, _text),
            node_bundle_target=_parse(e, "KILN_NODE_BUNDLE_TARGET", None, _text),
            builder_function=_parse(e, "KILN_BUILDER_FUNCTION", None, _text),
            runner_function=_parse(e, "KILN_RUNNER_FUNCTION", None, _text),
            runner_tenant=_parse(e, "KILN_RUNNER_TENANT", cls.runner_tenant, _tenant_mode),
            runner_endpoint_url=_parse(e, "KILN_RUNNER_ENDPOINT_URL", None, _url),
            warm_on_save=_parse(e, "KILN_WARM_ON_SAVE", cls.warm_on_save, _boolean),
            bundle_cache_dir=cache_dir,
            bundle_cache_mb=_parse(e, "KILN_BUNDLE_CACHE_MB", None, _positive_float),
            bundle_max_unpacked_mb=_parse(e, "KILN_BUNDLE_MAX_UNPACKED_MB", None, _positive_float),
            **_builder_settings(e),
            public_base_url=public_base_url,
            vault_kms_key=_parse(e, "KILN_VAULT_KMS_KEY", None, _text),
            vault_key_file=_parse(e, "KILN_VAULT_KEY_FILE", None, Path),
            cursor_secret=_parse(e, "KILN_CURSOR_SECRET", None, _text),
            state_secret=_parse(e, "KILN_STATE_SECRET", None, _text),
            ledger=_parse(e, "KILN_LEDGER", cls.ledger, _boolean),
            ledger_retention_days=_parse(
                e, "KILN_LEDGER_RETENTION_DAYS", cls.ledger_retention_days, _positive_int
            ),
            ledger_digest_key=_parse(e, "KILN_LEDGER_DIGEST_KEY", None, _text),
            in_lambda=in_lambda,
            runtime_api=_parse(e, "AWS_LAMBDA_RUNTIME_API", None, _text),
            lambda_handler=_parse(e, "_HANDLER", "", _text),
            pyenv_root=_parse(e, "PYENV_ROOT", None, _text),
            service_name=_parse(e, "POWERTOOLS_SERVICE_NAME", cls.service_name, _text),
            metrics_namespace=_parse(
                e, "POWERTOOLS_METRICS_NAMESPACE", cls.metrics_namespace, _text
            ),
            tracing=_parse(e, "KILN_TRACING", cls.tracing, _boolean),
            auth=auth,
            tasks=_task_settings(e),
            given=frozenset(
                name for name, value in e.items() if name.startswith(_OURS) and value.strip()
            ),
        )

    def with_(self, **changes: object) -> Settings:
        return replace(self, **changes)  # type: ignore[arg-type]

    @property
    def loopback_bind(self) -> bool:
        return self.bind_host in LOOPBACK_HOSTS

    @property
    def api(self) -> ApiSettings:
        """What the HTTP edge (kiln.api) reads."""
        return self._part(ApiSettings)

    @property
    def bundles(self) -> BundleSettings:
        """What the bundles room (records, builds, the unpacked cache) reads."""
        return self._part(BundleSettings)

    def _part(self, part: type[T]) -> T:
        """A room's settings: its fields, named as here, taken from these."""
        names = part.__dataclass_fields__  # type: ignore[attr-defined]
        return part(**{name: getattr(self, name) for name in names})


def inherited_environment(**overrides: str) -> dict[str, str]:
    """This process's environment plus `overrides`, for a trusted helper child (pip, npm).

    Tools never get this: the runner builds their environment from nothing.
    """
    return {**os.environ, **overrides}


def emulator_environment() -> dict[str, str]:
    """Only what Python needs to start the local emulator child: it must not hold the
    server's keys and secrets in its environment, whoever might read it."""
    keep = ("PATH", "PYTHONPATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "VIRTUAL_ENV")
    return {name: os.environ[name] for name in keep if name in os.environ}


def set_local_aws_defaults() -> None:
    """A region (and placeholder credentials) for boto3 in local runs, unless set; the
    local emulator's clients are given its own key (kiln.local.emulator)."""
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "kiln-local")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "kiln-local")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")


@dataclass(frozen=True)
class LocalSettings:
    """What the `kiln` commands read from the environment to find local state and a server.

    One local catalog per user: the state directory is KILN_STATE_DIR, else
    $XDG_STATE_HOME/kiln, else ~/.local/state/kiln, whatever directory a command runs in.
    """

    state_dir: Path
    state_dir_source: str  # how it was chosen, for messages that say where Kiln looked
    url: str | None = None  # KILN_URL: a server to use instead of the local one
    author_key: str | None = None  # KILN_AUTHOR_KEY
    # official schema files to check against too (`kiln publish`, the tests); never in the repo
    registry_schema_file: Path | None = None  # KILN_REGISTRY_SCHEMA_FILE
    card_schema_file: Path | None = None  # KILN_CARD_SCHEMA_FILE

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> LocalSettings:
        e = os.environ if env is None else env
        explicit = (e.get("KILN_STATE_DIR") or "").strip()
        if explicit:
            state, source = Path(explicit).expanduser(), "KILN_STATE_DIR"
        elif (e.get("XDG_STATE_HOME") or "").strip():
            state, source = Path(e["XDG_STATE_HOME"].strip()) / "kiln", "$XDG_STATE_HOME/kiln"
        else:
            home = Path(e["HOME"]) if e.get("HOME") else Path.home()
            state, source = home / ".local" / "state" / "kiln", "the per-user default"
        return cls(
            state_dir=state,
            state_dir_source=source,
            url=(e.get("KILN_URL") or "").strip() or None,
            author_key=(e.get("KILN_AUTHOR_KEY") or "").strip() or None,
            registry_schema_file=_parse(e, "KILN_REGISTRY_SCHEMA_FILE", None, Path),
            card_schema_file=_parse(e, "KILN_CARD_SCHEMA_FILE", None, Path),
        )

    def with_state_dir(self, given: str | None) -> LocalSettings:
        """These settings with `--state-dir` applied when it was given."""
        if not given:
            return self
        return replace(self, state_dir=Path(given).expanduser(), state_dir_source="--state-dir")
