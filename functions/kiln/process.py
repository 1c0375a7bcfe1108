"""What an entry point sets up in its own process, before (or instead of) a whole Kiln.

`prepare_process()` (log redaction, a non-dumpable process), the AWS clients and telemetry
made from the settings, and the runner's settings. Kept apart from `stack.py`, which imports
every room to wire a whole Kiln: the runner function (`kiln.lambda_handlers.runner`) needs
only these, and a new tenant's first call pays for every module its runtime imports
(bench/runner/new_tenant.py). `stack.py` uses them too.
"""

from __future__ import annotations

import contextlib
import gc
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from kiln.aws.clients import AwsClients
    from kiln.observability.telemetry import Telemetry
    from kiln.runner import RunnerSettings
    from kiln.settings import Settings

RUNNER_HANDLER = "kiln.lambda_handlers.runner"  # the runner function's handler (_HANDLER)


def start_runner_helper(settings: Settings) -> None:
    """In the runner function, start the runner's helper now, before the rest of the init's
    imports: its interpreter (~30 ms) boots meanwhile. It starts with an environment of its
    own (no AWS credentials), and the sweep keeps it as the runner's helper. A failure is
    left to the first run, which starts one and says why it cannot."""
    if settings.lambda_handler != RUNNER_HANDLER:
        return
    from kiln.runner import launcher

    with contextlib.suppress(launcher.LauncherError):
        launcher.start_early(Path(sys.executable))


def prepare_process() -> None:
    """Process-wide setup, once per process, by the entry point (never by a library)."""
    from kiln.observability import redact
    from kiln.runner.shield import protect_process

    redact.install()  # no key or bearer token reaches a log line from here on
    protect_process()  # tools cannot read this process's environ (AWS credentials, keys)


@contextmanager
def init_phase() -> Iterator[None]:
    """Builds without the cyclic garbage collector, then freezes what was built (gc.freeze).

    An entry point's init makes objects that live as long as the process (modules, classes,
    clients, the app) and almost no garbage; with the collector on, every 700 new objects
    start a collection, and the full ones walk the whole growing heap: a sixth of the public
    function's cold start (bench/coldstart: ~45 of ~250 ms of CPU to the first tools/list).
    Frozen, those objects are never walked again, so warm requests' collections stay small.
    Nested uses freeze once, when the outermost ends.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.freeze()
            gc.enable()


def aws_clients(settings: Settings) -> AwsClients:
    from kiln.aws.clients import make_clients

    # The runner function reads no table: a DynamoDB client made at its init would be ~30 ms
    # of CPU in every new tenant's first call, for nothing (bench/runner/new_tenant.py).
    runner = settings.lambda_handler == RUNNER_HANDLER
    return make_clients(
        endpoint_url=settings.endpoint_url,
        region=settings.region,
        profile=settings.profile,
        dynamodb_at_once=not runner,
        s3_without_boto3=runner,  # it only reads bundle zips: get_object
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
    from kiln.runner import RunnerSettings
    from kiln.runner.limits import default_own_temp_paths

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
    from kiln.runner.limits import COMMON_TCP_PORTS

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
