"""Configuration from the environment, read once at the edge and passed down."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from kiln.auth.settings import AuthSettings
from kiln.tasks.settings import TaskSettings

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
LOCAL_URL = "http://127.0.0.1:8000"  # where `kiln dev` serves by default


def _bool(value: str | None, default: bool) -> bool:
    if value is None or value.strip() == "":
        return default
    lowered = value.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off"}:
        return False
    raise ValueError(f"expected true or false, got {value!r}")


def _list(value: str | None) -> tuple[str, ...]:
    if not value:
        return ()
    return tuple(item.strip() for item in value.split(",") if item.strip())


def _float(value: str | None, default: float) -> float:
    return default if value is None or value.strip() == "" else float(value)


def _int(value: str | None, default: int) -> int:
    return default if value is None or value.strip() == "" else int(value)


def _task_settings(e: Mapping[str, str]) -> TaskSettings:
    d = TaskSettings()
    return TaskSettings(
        ttl_ms=_int(e.get("KILN_TASK_TTL_MS"), d.ttl_ms),
        poll_interval_ms=_int(e.get("KILN_TASK_POLL_INTERVAL_MS"), d.poll_interval_ms),
        heartbeat_s=_float(e.get("KILN_TASK_HEARTBEAT_S"), d.heartbeat_s),
        lease_s=_float(e.get("KILN_TASK_LEASE_S"), d.lease_s),
        start_grace_s=_float(e.get("KILN_TASK_START_GRACE_S"), d.start_grace_s),
        max_running_per_principal=_int(
            e.get("KILN_MAX_TASKS_PER_CALLER"), d.max_running_per_principal
        ),
        max_running_per_process=_int(e.get("KILN_MAX_RUNNING_TASKS"), d.max_running_per_process),
        worker_function=e.get("KILN_WORKER_FUNCTION") or None,
    )


@dataclass(frozen=True)
class Settings:
    table: str = "kiln"
    bucket: str = "kiln-local"
    region: str | None = None
    endpoint_url: str | None = None  # AWS_ENDPOINT_URL: moto server, DynamoDB Local, ...
    profile: str | None = None
    author_key: str | None = None  # the single configured author key (until the key system)
    public_anonymous: bool = True  # /mcp answers without a key
    allowed_origins: tuple[str, ...] = ()
    bind_host: str | None = None  # set by `kiln dev`: a loopback bind turns on Host checks
    instructions: str | None = None
    max_body_bytes: int = 1024 * 1024
    default_timeout_s: float = 30.0
    max_timeout_s: float = 900.0
    local_time_budget_s: float = 60.0  # "time left" outside Lambda
    max_concurrent_runs: int = 4
    max_run_queue: int = 32
    max_connections: int = 1000  # kiln dev: open HTTP connections (lowered to fit the fd limit)
    idle_timeout_s: float = 5.0  # kiln dev: a connection with no request in progress
    request_timeout_s: float = 10.0  # kiln dev: from a request's first byte to its last
    node_binary: str | None = None
    bundle_target: str | None = None
    builder_function: str | None = None
    bundle_cache_dir: Path | None = None
    public_base_url: str | None = None  # how clients reach this server (OAuth metadata)
    cursor_secret: str | None = None  # signs tools/list cursors; one value for every container
    extra: Mapping[str, str] = field(default_factory=dict)
    auth: AuthSettings = field(default_factory=AuthSettings)  # OAuth mode, scopes, secrets
    tasks: TaskSettings = field(default_factory=TaskSettings)  # long-running tools

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Read every KILN_* setting (and the standard AWS ones) from `env` or os.environ."""
        e = os.environ if env is None else env
        cache_dir = e.get("KILN_BUNDLE_CACHE_DIR")
        return cls(
            table=e.get("KILN_TABLE", cls.table),
            bucket=e.get("KILN_BUCKET", cls.bucket),
            region=e.get("AWS_REGION") or e.get("AWS_DEFAULT_REGION"),
            endpoint_url=e.get("AWS_ENDPOINT_URL") or None,
            profile=e.get("AWS_PROFILE") or None,
            author_key=e.get("KILN_AUTHOR_KEY") or None,
            public_anonymous=_bool(e.get("KILN_PUBLIC_ANONYMOUS"), cls.public_anonymous),
            allowed_origins=_list(e.get("KILN_ALLOWED_ORIGINS")),
            bind_host=e.get("KILN_BIND_HOST") or None,
            instructions=e.get("KILN_INSTRUCTIONS") or None,
            max_body_bytes=_int(e.get("KILN_MAX_BODY_BYTES"), cls.max_body_bytes),
            default_timeout_s=_float(e.get("KILN_DEFAULT_TIMEOUT_S"), cls.default_timeout_s),
            max_timeout_s=_float(e.get("KILN_MAX_TIMEOUT_S"), cls.max_timeout_s),
            local_time_budget_s=_float(e.get("KILN_LOCAL_TIME_BUDGET_S"), cls.local_time_budget_s),
            max_concurrent_runs=_int(e.get("KILN_MAX_CONCURRENT_RUNS"), cls.max_concurrent_runs),
            max_run_queue=_int(e.get("KILN_MAX_RUN_QUEUE"), cls.max_run_queue),
            max_connections=_int(e.get("KILN_MAX_CONNECTIONS"), cls.max_connections),
            idle_timeout_s=_float(e.get("KILN_IDLE_TIMEOUT_S"), cls.idle_timeout_s),
            request_timeout_s=_float(e.get("KILN_REQUEST_TIMEOUT_S"), cls.request_timeout_s),
            node_binary=e.get("KILN_NODE_BINARY") or None,
            bundle_target=e.get("KILN_BUNDLE_TARGET") or None,
            builder_function=e.get("KILN_BUILDER_FUNCTION") or None,
            bundle_cache_dir=Path(cache_dir) if cache_dir else None,
            public_base_url=e.get("KILN_PUBLIC_BASE_URL") or None,
            cursor_secret=e.get("KILN_CURSOR_SECRET") or None,
            auth=AuthSettings.from_env(e),
            tasks=_task_settings(e),
        )

    def with_(self, **changes: object) -> Settings:
        return replace(self, **changes)  # type: ignore[arg-type]

    @property
    def loopback_bind(self) -> bool:
        return self.bind_host in LOOPBACK_HOSTS


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
        )

    def with_state_dir(self, given: str | None) -> LocalSettings:
        """These settings with `--state-dir` applied when it was given."""
        if not given:
            return self
        return replace(self, state_dir=Path(given).expanduser(), state_dir_source="--state-dir")
