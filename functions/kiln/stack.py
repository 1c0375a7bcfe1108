"""The composition root: settings in, a running Kiln out.

Every entry point starts here: the Lambda handlers (`kiln.lambda_handlers`), `kiln dev` and
`kiln stdio` (`kiln.dev`), and the CLI (`kiln.cli`). They read `Settings.from_env()` once,
call `prepare_process()` (process-wide setup: log redaction, a non-dumpable process), and
`build_kiln(settings)` for the parts: AWS clients, the catalog store and its snapshots,
bundles, the runner, access control, the authoring service and the MCP endpoints. Nothing
below this module reads the environment or builds its own collaborators.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit

import kiln
from kiln.access.gate import CallGate
from kiln.access.ledger import CallLedger
from kiln.access.quotas import QuotaCounters
from kiln.access.resolve import ViewCatalog
from kiln.access.views import ViewStore
from kiln.auth.web import AccessControl
from kiln.aws import AwsClients, Lazy, make_clients
from kiln.bundles.service import Bundles, make_bundles
from kiln.catalog.snapshot import CatalogSnapshots
from kiln.catalog.store import CatalogStore
from kiln.runner import Runner, RunnerSettings
from kiln.runner.limits import COMMON_TCP_PORTS, default_own_temp_paths
from kiln.service import CatalogBackend
from kiln.settings import Settings

log = logging.getLogger("kiln.stack")

if TYPE_CHECKING:
    from starlette.applications import Starlette

    from kiln.authoring.service import AuthoringService
    from kiln.observability import Telemetry
    from kiln.protocol import McpEndpoint
    from kiln.tasks.service import TaskService
    from kiln.tasks.store import TaskStore
    from kiln.tasks.worker import TaskWorker

Role = Literal["all", "public", "admin"]


def prepare_process() -> None:
    """Process-wide setup, once per process, by the entry point (never by a library)."""
    from kiln.auth import redact
    from kiln.auth.process import protect_process

    redact.install()  # no key or bearer token reaches a log line from here on
    protect_process()  # tools cannot read this process's environ (AWS credentials, keys)


def aws_clients(settings: Settings) -> AwsClients:
    return make_clients(
        endpoint_url=settings.endpoint_url, region=settings.region, profile=settings.profile
    )


def telemetry(settings: Settings) -> Telemetry:
    from kiln.observability import Telemetry

    return Telemetry(settings.service_name, settings.metrics_namespace, tracing=settings.tracing)


def runner_settings(settings: Settings) -> RunnerSettings:
    return RunnerSettings(
        max_concurrent_runs=settings.max_concurrent_runs,
        max_queue=settings.max_run_queue,
        max_timeout_s=settings.max_timeout_s,
        node_binary=Path(settings.node_binary) if settings.node_binary else None,
        run_uids=settings.run_uids,
        disk_quota_bytes=settings.run_disk_quota_mb * 1024 * 1024,
        sweep_shared_temp=settings.sweep_shared_temp,
        shared_dirs=tuple(Path(d) for d in settings.run_shared_dirs),
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
    return tuple(port for port in ports if port != local)


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
    access: AccessControl
    bundles: Bundles
    views: ViewCatalog
    gate: CallGate

    @cached_property
    def authoring(self) -> AuthoringService:
        """The authoring service, built on first use: the public function never needs it, nor
        the catalog rules and schema machinery it imports."""
        from kiln.authoring.service import AuthoringService

        return AuthoringService(
            self.store,
            bundles=self.bundles,
            executor=self.backend,
            secrets=_LazySecretNames(self.access),
        )

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
        return TaskStore(c.dynamodb, c.s3, table=self.settings.table, bucket=self.settings.bucket)

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
            client = (
                Lazy(lambda: session.client("lambda"), threading.RLock())
                if session is not None
                else None
            )
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
        from kiln.protocol import McpEndpoint, ProtocolSettings

        return McpEndpoint(
            backend,
            ProtocolSettings(
                server_version=kiln.__version__,
                instructions=self.settings.instructions,
                max_body_bytes=self.settings.max_body_bytes,
                allowed_origins=self.settings.allowed_origins,
                loopback_bind=self.settings.loopback_bind,
                cursor_secret=self.cursor_secret,
                state_secret=self.state_secret,
            ),
            tasks=tasks,
        )


def build_kiln(settings: Settings, *, clients: AwsClients | None = None) -> Kiln:
    """The parts of a running Kiln, wired; `clients` defaults to the settings' AWS."""
    clients = clients or aws_clients(settings)
    bundles = make_bundles(settings, clients)
    store = CatalogStore(
        clients.dynamodb, clients.s3, table=settings.table, bucket=settings.bucket, bundles=bundles
    )
    snapshots = CatalogSnapshots(store, changes=clients.catalog_changes)
    runner = Runner(runner_settings(settings))
    access = AccessControl(settings, clients)
    views = ViewCatalog(
        ViewStore(clients.dynamodb, table=settings.table),
        lambda tool_id, number: store.revision(f"id:{tool_id}", number),
    )
    gate = call_gate(settings, clients)
    backend = CatalogBackend(
        snapshots, runner, bundles=bundles, secrets=access, views=views, gate=gate
    )
    return Kiln(
        settings, clients, store, snapshots, runner, backend, access, bundles, views, gate,
    )  # fmt: skip


def call_gate(settings: Settings, clients: AwsClients) -> CallGate:
    """Quota counters, and the call ledger unless KILN_LEDGER is off."""
    quotas = QuotaCounters(clients.dynamodb, table=settings.table)
    if not settings.ledger:
        return CallGate(quotas, None)
    ledger = CallLedger(
        clients.dynamodb,
        table=settings.table,
        digest_key=ledger_digest_key(settings),
        retention_days=settings.ledger_retention_days,
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


def build_app(
    settings: Settings, *, role: Role = "all", clients: AwsClients | None = None
) -> Starlette:
    """The ASGI app over a freshly built Kiln (what `kiln dev` and the Lambda handlers serve).

    The public role gets bare Starlette with the MCP routes and the metadata documents only:
    its cold start (the one MCP clients wait for) imports neither FastAPI nor the REST API.
    """
    if role == "public":
        from kiln.api.public import create_public_app

        return create_public_app(build_kiln(settings, clients=clients))
    from kiln.app import create_app

    return create_app(build_kiln(settings, clients=clients), role=role)


class _LazySecretNames:
    """Secrets through AccessControl, whose SSM client is made only when first asked."""

    def __init__(self, access: AccessControl) -> None:
        self._access = access

    def names(self, tool_id: str) -> list[str]:
        return list(self._access.secrets.names(tool_id))

    def set(self, tool_id: str, name: str, value: str) -> None:
        self._access.secrets.set(tool_id, name, value)

    def delete(self, tool_id: str, name: str) -> None:
        self._access.secrets.delete(tool_id, name)
