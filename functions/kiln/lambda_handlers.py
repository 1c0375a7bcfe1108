"""Lambda entry points: `mcp` (public /mcp), `admin` (/api/*, /admin/mcp), `builder` (bundles),
`worker` (MCP tasks: long tool runs, invoked asynchronously by `mcp`), `runner` (one tool's
run per invocation, tenant-isolated: see `kiln.serving.runner_function`).

Each function's handler is made during the init phase (which SnapStart snapshots), and only
the one that function uses: `kiln.lambda_handlers.mcp` never imports the admin app or the
builder. Mangum runs with the ASGI lifespan off, because it would start and stop the app on
every invocation; the app's resources live in these module-level objects instead, so warm
invocations reuse them. Everything is built by `kiln.stack` from the function's settings;
the runner function needs none of it but its process setup, clients and runner settings
(`kiln.process`), and imports `kiln.stack` never (a new tenant's first call pays for every
import: bench/runner/new_tenant.py).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kiln import process

if TYPE_CHECKING:
    from kiln.api.mcp import Serves
    from kiln.aws.clients import AwsClients
    from kiln.observability.telemetry import Handler, Telemetry
    from kiln.settings import Settings

# Lambda's only writable place; the builder's scratch space (EphemeralStorage in template.yaml).
BUILD_DIR = Path("/tmp")  # noqa: S108


def _init() -> Settings:
    from kiln.settings import Settings

    settings = Settings.from_env()
    # The runner's helper boots while the rest of the init loads (a new tenant's first run
    # would wait for it: bench/runner/new_tenant.py); RunnerFunction takes it over.
    process.start_runner_helper(settings)
    return settings


clients: AwsClients  # every function's but the runner's, made at init (SnapStart keeps them)
telemetry: Telemetry  # Powertools: every function's but the runner's (observability.plain)
# The init phase runs without the garbage collector: see process.init_phase.
with process.init_phase():
    settings = _init()
    # The runner reads no table and S3 only for a bundle: it imports botocore (~60 ms of a
    # new tenant's first call) on its first bundle (bench/runner/new_tenant.py).
    if settings.lambda_handler != process.RUNNER_HANDLER:
        clients = process.aws_clients(settings)
        telemetry = process.telemetry(settings)


def _http(serves: Serves, name: str) -> Handler:
    from mangum import Mangum

    from kiln import stack
    from kiln.api.apps import build_app
    from kiln.observability import telemetry as observability

    process.prepare_process()
    # Mangum logs "POST /mcp 200" at INFO for every request, which Lambda's JSON log format
    # (template.yaml) lets through: the request's own line says it already.
    logging.getLogger("mangum.http").setLevel(logging.WARNING)
    app = build_app(stack.build_kiln(settings, clients=clients), serves)
    return observability.http_handler(Mangum(app, lifespan="off"), name=name, telemetry=telemetry)


def _builder() -> Handler:
    from kiln.bundles.build import Toolchain
    from kiln.bundles.scheduler import handle_build_event
    from kiln.bundles.store import BundleStore
    from kiln.observability import telemetry as observability

    process.prepare_process()
    store = BundleStore(clients.dynamodb, clients.s3, table=settings.table, bucket=settings.bucket)
    toolchain = Toolchain.from_settings(settings.bundles)

    def build(event: dict[str, Any], context: Any) -> Any:
        return handle_build_event(
            event, context, store=store, workdir=BUILD_DIR, toolchain=toolchain
        )

    return observability.instrument(build, name="builder", telemetry=telemetry)


def _worker() -> Handler:
    from kiln import stack
    from kiln.observability import telemetry as observability
    from kiln.tasks.worker import handle_event

    process.prepare_process()  # tools cannot read this process's environ (AWS credentials)
    kiln = stack.build_kiln(settings, clients=clients)
    worker = kiln.task_worker

    def run(event: dict[str, Any], context: Any) -> Any:
        return handle_event(event, context, worker, webhook=kiln.deliver_approval_webhook)

    return observability.instrument(run, name="worker", telemetry=telemetry)


def _runner() -> Handler:
    from kiln.observability import plain
    from kiln.serving.runner_function import RunnerFunction

    process.prepare_process()  # tools cannot read this process's environ (AWS credentials)
    function = RunnerFunction(
        process.runner_settings(settings),
        lambda: process.aws_clients(settings).s3,  # botocore on the first bundle, not at init
        settings.bucket,
        runtime_api=settings.runtime_api,
        sweep_patience_s=settings.sweep_patience_s,
    )
    if settings.tracing:  # X-Ray through Powertools' Tracer, as the other functions
        from kiln.observability import telemetry as observability

        traced = process.telemetry(settings)
        return observability.instrument(function.handle, name="runner", telemetry=traced)
    # Its log lines through the runtime's own handler, and ColdStart: no Powertools (~11-17 ms
    # of a new tenant's first call: bench/runner/new_tenant.py).
    return plain.instrument(
        function.handle, namespace=settings.metrics_namespace, service=settings.service_name
    )


_FACTORIES = {
    "mcp": lambda: _http("public", "mcp"),
    "admin": lambda: _http("admin", "admin"),
    "builder": _builder,
    "worker": _worker,
    "runner": _runner,
}


def __getattr__(name: str) -> Handler:
    # The runtime looks the handler up once, at init: that is when it gets built.
    if name not in _FACTORIES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    with process.init_phase():
        handler = _FACTORIES[name]()
    globals()[name] = handler
    return handler
