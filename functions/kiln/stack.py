"""The composition root: settings in, a running Kiln out.

Every entry point starts here: the Lambda handlers (`kiln.lambda_handlers`), `kiln dev` and
`kiln stdio` (`kiln.local.dev`), and the CLI (`kiln.cli.main`). They read
`Settings.from_env()` once, call `prepare_process()` (process-wide setup: log redaction, a
non-dumpable process), and `build_kiln(settings)` for the `Kiln` it wires: AWS clients, the catalog
store and its snapshots, bundles, the runner, access control, the authoring service and the
MCP endpoints. Nothing below this module reads the environment or builds its own
collaborators.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import kiln
from kiln.access.approvals import SpentApprovals
from kiln.access.pins import CatalogBinder
from kiln.access.quotas import QuotaCounters
from kiln.access.resolve import ViewCatalog
from kiln.access.secrets import SecretStore
from kiln.access.views import MODES, ViewStore
from kiln.accounting.gate import CallGate
from kiln.accounting.ledger import DEFAULT_SHARDS, CallLedger
from kiln.aws.clients import AwsClients, lazy, make_clients
from kiln.bundles.hooks import Bundles, make_bundles
from kiln.catalog.snapshot import CatalogSnapshots
from kiln.catalog.store import CatalogStore
from kiln.connections import Connections
from kiln.connections.calls import RunTokens
from kiln.connections.envelope import FileKeys, KeyKeeper, KmsKeys
from kiln.connections.providers import ProviderStore
from kiln.connections.vault import Vault
from kiln.runner import Runner, RunnerSettings
from kiln.runner.limits import COMMON_TCP_PORTS, default_own_temp_paths
from kiln.runner.remote import RemoteRunner
from kiln.serving.backend import CatalogBackend
from kiln.settings import Settings

log = logging.getLogger("kiln.stack")

if TYPE_CHECKING:
    from kiln.api.settings import ApiSettings
    from kiln.authoring.service import AuthoringService
    from kiln.catalog.model import Tool
    from kiln.identity.callers import Callers
    from kiln.observability.telemetry import Telemetry
    from kiln.protocol import McpEndpoint
    from kiln.serving.warming import Warmer
    from kiln.tasks.service import TaskService
    from kiln.tasks.store import TaskStore
    from kiln.tasks.worker import TaskWorker


def prepare_process() -> None:
    """Process-wide setup, once per process, by the entry point (never by a library)."""
    from kiln.observability import redact
    from kiln.runner.shield import protect_process

    redact.install()  # no key or bearer token reaches a log line from here on
    protect_process()  # tools cannot read this process's environ (AWS credentials, keys)


def aws_clients(settings: Settings) -> AwsClients:
    return make_clients(
        endpoint_url=settings.endpoint_url, region=settings.region, profile=settings.profile
    )


def telemetry(settings: Settings) -> Telemetry:
    from kiln.observability.telemetry import Telemetry

    return Telemetry(
        settings.service_name,
        settings.metrics_namespace,
        tracing=settings.tracing,
        metrics_flush_s=settings.metrics_flush_s,
    )


def runner_settings(settings: Settings) -> RunnerSettings:
    return RunnerSettings(
        max_concurrent_runs=settings.max_concurrent_runs,
        max_queue=settings.max_run_queue,
        max_timeout_s=settings.max_timeout_s,
        node_binary=Path(settings.node_binary) if settings.node_binary else None,
        run_uids=settings.run_uids,
        disk_quota_bytes=settings.run_disk_quota_mb * 1024 * 1024,
        memory_limit_bytes=settings.run_memory_mb * 1024 * 1024,
        sweep_shared_temp=settings.sweep_shared_temp,
        shared_dirs=tuple(Path(d) for d in settings.run_shared_dirs),
        unix_sockets=settings.run_unix_sockets,
        serialize_shared_uid_runs=settings.serialize_shared_uid_runs,
        standby_runs=settings.run_standby,
        tcp_ports=run_tcp_ports(settings),
        own_temp_paths=(
            *default_own_temp_paths(),
            *([Path(settings.bundle_cache_dir)] if settings.bundle_cache_dir else []),
        ),
    )


def run_tcp_ports(settings: Settings) -> tuple[int, ...] | None:
    """The TCP ports a run may connect to (None: any), never a local store endpoint's.

    A local emulator (`kiln dev`) holds the whole catalog; a tool must not even reach it.
    Landlock allows ports, not addresses, so "any port but the emulator's" would take
    65,534 rules and tens of milliseconds per run: runs get the common service ports
    instead (`COMMON_TCP_PORTS`: web, databases, queues, local model servers), or what
    KILN_RUN_TCP_PORTS says. With a remote store (Lambda) every port stays open.
    """
    wanted = settings.run_tcp_ports
    local = _loopback_port(settings.endpoint_url)
    if wanted == "all" or (wanted == "auto" and local is None):
        return None
    ports = COMMON_TCP_PORTS if isinstance(wanted, str) else wanted
    # Nor kiln dev's own port: a tool calling Kiln from inside a run could wait for itself.
    return tuple(port for port in ports if port not in (local, settings.bind_port))


def _loopback_port(url: str | None) -> int | None:
    if not url:
        return None
    parsed = urlsplit(url)
    host = parsed.hostname or ""
    if host != "localhost" and not host.startswith("127.") and host != "::1":
        return None
    try:
        return parsed.port or (443 if parsed.scheme == "https" else 80)
    except ValueError:
        return None


@dataclass
class Kiln:
    """Everything a running Kiln holds; made once per process by `build_kiln`."""

    settings: Settings
    clients: AwsClients
    store: CatalogStore
    snapshots: CatalogSnapshots
    runner: Runner
    backend: CatalogBackend
    callers: Callers
    secrets: SecretStore
    bundles: Bundles
    views: ViewCatalog
    gate: CallGate
    connections: Connections | None = None  # None: no vault key configured

    @cached_property
    def api_settings(self) -> ApiSettings:
        """What the HTTP routes and middleware read (kiln.api never sees the whole Settings);
        made once: every MCP request reads it, and each `Settings.api` is a new object."""
        return self.settings.api

    @cached_property
    def authoring(self) -> AuthoringService:
        """The authoring service, built on first use: the public function never needs it, nor
        the catalog rules and schema machinery it imports."""
        from kiln.authoring.service import AuthoringService

        return AuthoringService(
            self.store,
            bundles=self.bundles,
            executor=self.backend,
            secrets=self.secrets,
            warmer=None if self.settings.in_lambda else self.warmer,
        )

    @cached_property
    def warmer(self) -> Warmer:
        """Prepares standbys for saved and recently called tools (kiln.serving.warming)."""
        from kiln.serving.warming import Warmer

        return Warmer(self.backend, budget=self.runner.settings.standby_runs)

    def warm_recent(self) -> list[str]:
        """Warm the most recently called tools (`kiln dev` at start), within the standby
        budget; the names of those being warmed."""
        limit = self.runner.settings.standby_runs
        if limit <= 0 or self.gate.ledger is None or not self.runner.standby_capable:
            return []
        try:
            from kiln.accounting.ledger import LedgerQuery

            recent, _ = self.gate.ledger.query(LedgerQuery(limit=200))
        except Exception:  # the ledger is a convenience here: start without warming
            log.warning("could not read the call ledger to warm recent tools", exc_info=True)
            return []
        wanted = ("ok", "tool_error", "not_ready")  # a tool callers use, whatever it answered
        called = (entry.tool for entry in recent if entry.outcome in wanted)
        return self.warmer.warm_recent(called, self._enabled_tool, limit)

    def _enabled_tool(self, name: str) -> Tool | None:
        from kiln.catalog.errors import CatalogError

        try:
            tool = self.store.get(name)
        except CatalogError:
            return None
        return tool if tool.enabled and not tool.deleted else None

    def close_runner(self) -> None:
        """Stop warming, then let the runner's standbys go (at shutdown)."""
        if "warmer" in self.__dict__:
            self.warmer.close()
        self.runner.close()

    @cached_property
    def task_worker(self) -> TaskWorker:
        """Runs one stored task (in this process's pool, or in the worker function)."""
        from kiln.catalog.store import utc_now
        from kiln.protocol.calling import ToolCaller
        from kiln.tasks.worker import TaskWorker

        return TaskWorker(
            self.task_store,
            self.backend,
            ToolCaller(self.backend),
            self.settings.tasks,
            now_iso=utc_now,
            gate=self.gate,
        )

    @cached_property
    def task_store(self) -> TaskStore:
        from kiln.tasks.store import TaskStore

        c = self.clients
        store = TaskStore(c.dynamodb, c.s3, table=self.settings.table, bucket=self.settings.bucket)
        if self.gate.ledger is not None:  # a task's entry is written with its end: count it
            store.ledgered = self.gate.ledger.counted
        return store

    @cached_property
    def tasks(self) -> TaskService:
        """Tasks of the public endpoint: a worker function in AWS, a local pool elsewhere."""
        from kiln.tasks.service import LambdaStarter, LocalPool, Starter, TaskService

        config = self.settings.tasks
        starter: Starter
        if config.worker_function:
            session = self.clients.session
            # Made when the first task starts: the first tools/list builds this service too,
            # and a Lambda client (boto3, its service model) is a tenth of a cold start.
            client = lazy(lambda: session.client("lambda"), threading.RLock())
            starter = LambdaStarter(client, config.worker_function)
        else:
            starter = LocalPool(
                self.task_worker,
                max_running=config.max_running_per_process,
                runner_slots=self.settings.max_concurrent_runs,
            )
        return TaskService(self.task_store, starter, config, self.backend, gate=self.gate)

    async def stop_tasks(self) -> None:
        """Stop the task runs this process holds (kiln dev's shutdown)."""
        if "tasks" in self.__dict__:  # built only once /mcp was used
            await self.tasks.close()

    @property
    def cursor_secret(self) -> bytes:
        """The same in every container of a deployment, so a cursor works wherever it lands."""
        configured = self.settings.cursor_secret
        seed = configured or f"kiln-cursor:{self.settings.table}:{self.settings.bucket}"
        return hashlib.sha256(seed.encode()).digest()

    @cached_property
    def state_secret(self) -> bytes:
        """One per process unless configured (a state sealed here then opens only here)."""
        configured = self.settings.state_secret
        return configured.encode() if configured else os.urandom(32)

    @cached_property
    def endpoint(self) -> McpEndpoint:
        """The MCP endpoint, built on first use (a REST-only function never pays for it)."""
        return self._endpoint(self.backend, tasks=self.tasks)

    @cached_property
    def admin_endpoint(self) -> McpEndpoint:
        """`/admin/mcp`: the catalog's tools plus the built-in kiln_* authoring tools."""
        from kiln.authoring.admin import AdminBackend

        return self._endpoint(AdminBackend(self.backend, self.authoring))

    def _endpoint(self, backend: Any, tasks: TaskService | None = None) -> McpEndpoint:
        from kiln.protocol import CallLimits, McpEndpoint, ProtocolSettings

        return McpEndpoint(
            backend,
            ProtocolSettings(
                server_version=kiln.__version__,
                instructions=self.settings.instructions,
                max_body_bytes=self.settings.max_body_bytes,
                allowed_origins=self.settings.allowed_origins,
                loopback_bind=self.settings.loopback_bind,
                check_origin=False,  # both apps' edge (kiln.api.middleware) checks them first
                cursor_secret=self.cursor_secret,
                # In Lambda a held invocation is billed by the millisecond: tasks/result of a
                # task still working answers at once (one read, as tasks/get), saying to poll
                # tasks/get; a server that keeps running waits up to 20 s for the end.
                task_result_wait_s=0.0 if self.settings.in_lambda else 20.0,
                state_secret=self.state_secret,
                call_limits=CallLimits(
                    self.settings.call_depth, self.settings.call_count, self.settings.call_seconds
                ),
            ),
            tasks=tasks,
        )


def build_kiln(settings: Settings, *, clients: AwsClients | None = None) -> Kiln:
    """A running Kiln, wired; `clients` defaults to the settings' AWS."""
    clients = clients or aws_clients(settings)
    bundles = make_bundles(settings.bundles, clients)
    store = CatalogStore(
        clients.dynamodb, clients.s3, table=settings.table, bucket=settings.bucket, bundles=bundles
    )
    snapshots = CatalogSnapshots(
        store,
        changes=clients.catalog_changes,
        max_staleness_s=settings.catalog_max_staleness_s,
    )
    runner = Runner(runner_settings(settings))
    callers = make_callers(settings, clients)
    secrets = make_secrets(settings, clients)
    connections = make_connections(settings, clients)
    views = ViewCatalog(
        ViewStore(clients.dynamodb, table=settings.table, binder=CatalogBinder(store)),
        lambda tool_id, number: store.revision(f"id:{tool_id}", number),
    )
    gate = call_gate(settings, clients)
    backend = CatalogBackend(
        snapshots, runner, bundles=bundles, secrets=secrets, views=views, gate=gate,
        remote=remote_runner(settings, clients, bundles),
        approvals=SpentApprovals(clients.dynamodb, table=settings.table),
        mode=next((m for m in MODES if m == settings.catalog_mode), "list"),
        connections=RunTokens(connections) if connections is not None else None,
    )  # fmt: skip
    return Kiln(
        settings, clients, store, snapshots, runner, backend, callers, secrets, bundles, views,
        gate, connections,
    )  # fmt: skip


def remote_runner(settings: Settings, clients: AwsClients, bundles: Bundles) -> RemoteRunner | None:
    """The runner function's client when KILN_RUNNER_FUNCTION is set (runs then never run here).

    No retries (a retried invoke could run a tool twice); the read timeout outlasts the
    longest run, and each call is bounded by its caller's remaining time instead.
    """
    if not settings.runner_function:
        return None
    from botocore.config import Config

    from kiln.runner.remote import RemoteRunner

    session = clients.session
    config = Config(
        read_timeout=settings.max_timeout_s + 30,
        connect_timeout=5,
        retries={"total_max_attempts": 1},
        tcp_keepalive=True,
    )
    endpoint = settings.runner_endpoint_url
    client = lazy(
        lambda: session.client("lambda", endpoint_url=endpoint, config=config), threading.RLock()
    )

    def record(bundle_id: str) -> dict[str, Any]:
        """A ready bundle's record for the payload; BundleNotReadyError as a local run says."""
        from kiln.bundles.cache import not_ready_error

        found = bundles.store.get(bundle_id)
        if found is None or found.status != "ready":
            raise not_ready_error(found, bundle_id)
        return found.to_json()

    return RemoteRunner(
        lambda: client, settings.runner_function, tenant_mode=settings.runner_tenant,
        bundle_record=record,
    )  # fmt: skip


def call_gate(settings: Settings, clients: AwsClients) -> CallGate:
    """Quota counters, and the call ledger unless KILN_LEDGER is off."""
    quotas = QuotaCounters(
        clients.dynamodb, table=settings.table, claim_horizon_s=settings.quota_claim_horizon_s
    )
    if not settings.ledger:
        return CallGate(quotas, None)
    ledger = CallLedger(
        clients.dynamodb,
        table=settings.table,
        digest_key=ledger_digest_key(settings),
        retention_days=settings.ledger_retention_days,
        shards=settings.ledger_shards or DEFAULT_SHARDS,
        totals_flush_s=settings.ledger_totals_flush_s,
    )
    return CallGate(quotas, ledger)


def ledger_digest_key(settings: Settings) -> bytes:
    """The HMAC key of argument digests: configured, else derived from the author key (kiln
    dev), else random per process (digests then compare only within one container)."""
    secret = settings.ledger_digest_key or settings.author_key
    if secret:
        return hashlib.sha256(f"kiln-ledger-digest:{secret}".encode()).digest()
    log.warning("KILN_LEDGER_DIGEST_KEY is not set: argument digests compare within this process")
    return os.urandom(32)


STATIC_AUTHOR_NAME = "author"  # how KILN_AUTHOR_KEY appears in audit records


def make_callers(settings: Settings, clients: AwsClients) -> Callers:
    """Who is calling: API keys, OAuth tokens (when an issuer is set), the static author key."""
    from kiln.identity.callers import Callers
    from kiln.identity.keys import KeyStore
    from kiln.identity.policy import Authenticator, Permission
    from kiln.identity.settings import check_audience
    from kiln.identity.tokens import JwtVerifier

    auth = settings.auth
    check_audience(auth, settings.public_base_url)  # Settings made in code skip from_env
    keys = KeyStore(clients.dynamodb, table=settings.table)
    verifier = (
        JwtVerifier(issuer=auth.oauth_issuer, jwks_url=auth.oauth_jwks_url, scopes=auth.scopes)
        if auth.oauth_issuer
        else None
    )
    static: dict[str, tuple[str, Permission]] = {}
    if settings.author_key:
        static[settings.author_key] = (STATIC_AUTHOR_NAME, "author")
    authenticator = Authenticator(
        keys=keys,
        verifier=verifier,
        scopes=auth.scopes,
        anonymous_calls=settings.public_anonymous,
        audiences=auth.oauth_audiences,
        public_url=settings.public_base_url,
        static_keys=static,
    )
    return Callers(keys, authenticator, auth, public_base_url=settings.public_base_url)


def make_connections(settings: Settings, clients: AwsClients) -> Connections | None:
    """Each caller's OAuth connections (kiln.connections), when a vault key is configured:
    KMS in AWS, a key file beside kiln dev's state."""
    keeper: KeyKeeper
    session = clients.session
    if settings.vault_kms_key:
        kms = lazy(
            lambda: session.client("kms", endpoint_url=settings.endpoint_url), threading.RLock()
        )
        keeper = KmsKeys(kms, settings.vault_kms_key)
    elif settings.vault_key_file is not None:
        keeper = FileKeys(settings.vault_key_file)
    else:
        return None
    ssm = lazy(lambda: session.client("ssm", endpoint_url=settings.endpoint_url), threading.RLock())
    providers = ProviderStore(
        clients.dynamodb, ssm, table=settings.table, secrets_prefix=settings.auth.secrets_prefix
    )
    return Connections(providers, Vault(clients.dynamodb, keeper, table=settings.table))


def make_secrets(settings: Settings, clients: AwsClients) -> SecretStore:
    """Per-tool secrets; the SSM client is made on first use (no secrets, no client)."""
    session = clients.session
    ssm = lazy(lambda: session.client("ssm", endpoint_url=settings.endpoint_url), threading.RLock())
    return SecretStore(ssm, settings.auth.secrets_prefix)
