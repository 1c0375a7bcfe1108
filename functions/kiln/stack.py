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

import functools
import hashlib
import logging
import os
import threading
from dataclasses import dataclass, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any

import kiln
from kiln.access.approvals import SpentApprovals
from kiln.access.pins import CatalogBinder
from kiln.access.quotas import QuotaCounters
from kiln.access.resolve import ViewCatalog
from kiln.access.secrets import SecretStore
from kiln.access.view_store import ViewStore
from kiln.access.views import MODES
from kiln.accounting.gate import CallGate
from kiln.accounting.idempotency import CallKeys
from kiln.aws.clients import AwsClients, lazy
from kiln.bundles.hooks import Bundles, make_bundles
from kiln.catalog.snapshot import CatalogSnapshots
from kiln.catalog.store import CatalogStore
from kiln.process import aws_clients as aws_clients  # the entry points call these here too
from kiln.process import prepare_process as prepare_process
from kiln.process import runner_settings
from kiln.process import telemetry as telemetry
from kiln.serving.backend import CatalogBackend
from kiln.settings import Settings

log = logging.getLogger("kiln.stack")

if TYPE_CHECKING:
    from kiln.access.approval_store import ApprovalStore
    from kiln.accounting.ledger import CallLedger
    from kiln.api.settings import ApiSettings
    from kiln.authoring.service import AuthoringService, Warming
    from kiln.catalog.model import Tool
    from kiln.connections import Connections
    from kiln.connections.calls import RunTokens
    from kiln.connections.envelope import KeyKeeper
    from kiln.identity.callers import Callers
    from kiln.identity.keys import KeyStore
    from kiln.protocol import McpEndpoint
    from kiln.runner import Runner
    from kiln.runner.remote import RemoteRunner
    from kiln.serving.warming import Warmer
    from kiln.tasks.approving import ApprovalTasks
    from kiln.tasks.service import TaskService
    from kiln.tasks.store import TaskStore
    from kiln.tasks.worker import TaskWorker


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
            warmer=self._save_warmer(),
        )

    def _save_warmer(self) -> Warming | None:
        """A save warms its tool's standby; on Lambda its runner environment (TenantWarmer)."""
        if not self.settings.in_lambda:
            return self.warmer
        from kiln.serving.warming import TenantWarmer

        remote = remote_runner(self.settings, self.clients, self.bundles)
        return TenantWarmer(remote) if remote and self.settings.warm_on_save else None

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
            approvals=self.approval_store,
        )

    @cached_property
    def approval_store(self) -> ApprovalStore:
        """Approvals that wait for a person (kiln.access.approval_store)."""
        from kiln.access.approval_store import ApprovalStore

        return ApprovalStore(self.clients.dynamodb, table=self.settings.table)

    def approval_tasks(self, service: TaskService) -> ApprovalTasks:
        """Calls that wait for a person's approval, as tasks of `service`."""
        from kiln.access.webhook import Webhook
        from kiln.identity.audit import record_write
        from kiln.tasks.approving import ApprovalTasks
        from kiln.tasks.service import LambdaStarter

        config = self.settings.tasks
        hook = None
        if config.approval_webhook_url and config.approval_webhook_secret:
            hook = Webhook(
                config.approval_webhook_url, config.approval_webhook_secret,
                attempts=config.approval_webhook_attempts,
                backoff_s=config.approval_webhook_backoff_s,
            )  # fmt: skip
        notify = None
        if hook is not None and isinstance(service.starter, LambdaStarter):
            notify = service.starter.announce  # the worker function delivers it (retried)
        return ApprovalTasks(
            service, self.approval_store, keys=self.callers.keys, head_of=self._head_of,
            webhook=hook, notify=notify, base_url=self.settings.public_base_url or "",
            audit=record_write,
        )  # fmt: skip

    async def deliver_approval_webhook(self, approval_id: str) -> bool:
        """The worker function's part of an approval's webhook (retried there)."""
        waiting = self.tasks.waiting
        return waiting is not None and await waiting.deliver(approval_id)

    async def _head_of(self, name: str) -> int | None:
        """The head revision of the enabled tool `name` now (None: none such)."""
        tool = (await self.snapshots.fresh()).tools.get(name)
        return tool.head.number if tool is not None and tool.enabled else None

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
        service = TaskService(self.task_store, starter, config, self.backend, gate=self.gate)
        service.waiting = self.approval_tasks(service)
        return service

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
        """The MCP endpoint, built on first use (a REST-only function never pays for it);
        its task service on the first call or tasks/* request (a tools/list never needs it,
        nor the task, approval and webhook modules it imports: bench/coldstart)."""
        return self._endpoint(self.backend, tasks=lazy(lambda: self.tasks, threading.RLock()))

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
        # its item reads (the version, once per window) signed without the client (kiln.aws.items)
        replace(store, ddb=clients.items),
        changes=clients.catalog_changes,
        max_staleness_s=settings.catalog_max_staleness_s,
    )
    runner = local_runner(settings)
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
        idempotency=call_keys(settings, clients),
        mode=next((m for m in MODES if m == settings.catalog_mode), "list"),
        connections=run_tokens(connections),
    )  # fmt: skip
    return Kiln(
        settings, clients, store, snapshots, runner, backend, callers, secrets, bundles, views,
        gate, connections,
    )  # fmt: skip


def local_runner(settings: Settings) -> Runner:
    """The runner of runs made in this process, made (and its process machinery imported) on
    first use: the public function lists tools long before a run, and in AWS sends every run
    to the runner function (remote_runner), never making one."""

    def make() -> Runner:
        from kiln.runner import Runner

        return Runner(runner_settings(settings))

    return lazy(make, threading.RLock())


def call_keys(settings: Settings, clients: AwsClients) -> CallKeys:
    """Idempotency keys and the answers they stand for (kiln.accounting.idempotency)."""
    return CallKeys(
        clients.dynamodb, table=settings.table, window_s=settings.idempotency_window_s,
        max_answer_bytes=settings.idempotency_max_answer_bytes,
        wait_s=settings.idempotency_wait_s,
    )  # fmt: skip


def remote_runner(settings: Settings, clients: AwsClients, bundles: Bundles) -> RemoteRunner | None:
    """The runner function's client when KILN_RUNNER_FUNCTION is set (runs then never run here).

    No retries (a retried invoke could run a tool twice); the read timeout outlasts the
    longest run, and each call is bounded by its caller's remaining time instead. Signed and
    sent without a botocore client (kiln.aws.invoke: about half the CPU of a client's call).
    Made on the first run (its payload code and the runner's model are no part of a list).
    """
    if not settings.runner_function:
        return None
    make = functools.partial(_remote_runner, settings.runner_function, settings, clients, bundles)
    return lazy(make, threading.RLock())


def _remote_runner(
    function: str, settings: Settings, clients: AwsClients, bundles: Bundles
) -> RemoteRunner:
    from kiln.aws.invoke import SignedInvoke
    from kiln.runner.remote import RemoteRunner

    session = clients.session

    def signed() -> SignedInvoke:
        return SignedInvoke(
            session.get_credentials(),
            session.region_name or "us-east-1",
            endpoint_url=settings.runner_endpoint_url,
            connect_timeout_s=5,
            read_timeout_s=settings.max_timeout_s + 30,
        )

    client = lazy(signed, threading.RLock())

    def record(bundle_id: str) -> dict[str, Any]:
        """A ready bundle's record for the payload; BundleNotReadyError as a local run says."""
        from kiln.bundles.cache import not_ready_error

        found = bundles.store.get(bundle_id)
        if found is None or found.status != "ready":
            raise not_ready_error(found, bundle_id)
        return found.to_json()

    return RemoteRunner(
        lambda: client, function, tenant_mode=settings.runner_tenant,
        bundle_record=record,
    )  # fmt: skip


def call_gate(settings: Settings, clients: AwsClients) -> CallGate:
    """Quota counters, and the call ledger unless KILN_LEDGER is off."""
    quotas = QuotaCounters(
        clients.dynamodb, table=settings.table, claim_horizon_s=settings.quota_claim_horizon_s
    )
    if not settings.ledger:
        return CallGate(quotas, None)
    digest_key = ledger_digest_key(settings)  # its warning, if any, is the init's

    def make() -> CallLedger:  # on the first call's entry: the ledger is not in a cold start's init
        from kiln.accounting.ledger import DEFAULT_SHARDS, CallLedger

        return CallLedger(
            clients.items,  # each entry a PutItem signed without the client (kiln.aws.items)
            table=settings.table,
            digest_key=digest_key,
            retention_days=settings.ledger_retention_days,
            shards=settings.ledger_shards or DEFAULT_SHARDS,
            totals_flush_s=settings.ledger_totals_flush_s,
        )

    return CallGate(quotas, lazy(make, threading.RLock()))


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
    from kiln.identity.policy import Authenticator, Permission
    from kiln.identity.settings import check_audience
    from kiln.identity.tokens import JwtVerifier

    auth = settings.auth
    check_audience(auth, settings.public_base_url)  # Settings made in code skip from_env
    keys = lazy(functools.partial(_key_store, settings, clients), threading.Lock())
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


def _key_store(settings: Settings, clients: AwsClients) -> KeyStore:
    """Made by the first request with a key (an anonymous list reads none: ~2 ms of a cold
    start's imports, test_cold_start_imports)."""
    from kiln.identity.keys import KeyStore

    return KeyStore(clients.dynamodb, table=settings.table)


def run_tokens(connections: Connections | None) -> RunTokens | None:
    """What a run gets of its caller's connections (None: none configured)."""
    if connections is None:
        return None
    from kiln.connections.calls import RunTokens

    return RunTokens(connections)


def make_connections(settings: Settings, clients: AwsClients) -> Connections | None:
    """Each caller's OAuth connections (kiln.connections), when a vault key is configured:
    KMS in AWS, a key file beside kiln dev's state; their modules load only then."""
    if not settings.vault_kms_key and settings.vault_key_file is None:
        return None
    from kiln.connections import Connections
    from kiln.connections.envelope import FileKeys, KmsKeys
    from kiln.connections.providers import ProviderStore
    from kiln.connections.vault import Vault

    keeper: KeyKeeper
    session = clients.session
    if settings.vault_kms_key:
        kms = lazy(
            lambda: session.client("kms", endpoint_url=settings.endpoint_url), threading.RLock()
        )
        keeper = KmsKeys(kms, settings.vault_kms_key)
    else:
        assert settings.vault_key_file is not None
        keeper = FileKeys(settings.vault_key_file)
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
