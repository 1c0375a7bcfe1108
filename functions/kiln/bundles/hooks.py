"""Bundles as the rest of Kiln uses them: the catalog's save hook, the call path, the REST view.

`make_bundles(settings.bundles, clients)` picks who builds: the builder function named by
`KILN_BUILDER_FUNCTION` (asynchronous invoke), else a background worker in this process
(`kiln dev`, tests). Inside Lambda without a builder function nothing is built; bundles stay
pending and say so, and `kiln bundles build` can build them from a workstation or CI.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kiln.aws.clients import AwsClients, lazy
from kiln.bundles.errors import BundleStateError
from kiln.bundles.identity import bundle_id, default_target
from kiln.bundles.scheduler import (
    Adopter,
    BuildScheduler,
    LambdaBuildScheduler,
    LocalBuildWorker,
    request_bundle,
)
from kiln.bundles.settings import BundleSettings
from kiln.bundles.store import BundleRecord, BundleStore

if TYPE_CHECKING:
    from kiln.bundles.build import Toolchain
    from kiln.bundles.cache import BundleCache

log = logging.getLogger("kiln.bundles")


class NoBuilder:
    """Inside Lambda with no builder function configured: records stay pending."""

    def schedule(self, bundle_id: str) -> None:
        log.warning(
            "bundle %s is pending: KILN_BUILDER_FUNCTION is not set, so nothing builds it; "
            "run `kiln bundles build` for it",
            bundle_id,
        )


@dataclass
class Bundles:
    """One process's bundle machinery: records, a builder, and the unpacked cache."""

    store: BundleStore
    scheduler: BuildScheduler
    cache: BundleCache
    python_target: str = field(default_factory=lambda: default_target("python"))
    node_target: str = field(default_factory=lambda: default_target("node"))

    def target_for(self, language: str) -> str:
        return self.node_target if language == "node" else self.python_target

    # -- catalog save hook (kiln.catalog.store.BundleHook) ----------------------------------

    def identify(self, language: str, requirements: tuple[str, ...]) -> str | None:
        """The bundle id a tool with these requirements uses, computed without side effects."""
        return bundle_id(language, self.target_for(language), requirements)

    def prepare(self, language: str, requirements: tuple[str, ...]) -> str | None:
        """The bundle id for a tool being saved; starts its build if it is not built yet."""
        record = request_bundle(
            self.store, self.scheduler, language, self.target_for(language), requirements
        )
        return None if record is None else record.id

    # -- call path (kiln.serving.packages.BundlePaths) --------------------------------------------

    def use(
        self, bundle_id: str, resolved: str | None = None
    ) -> contextlib.AbstractContextManager[Path]:
        """The unpacked folder (of the build that resolved to `resolved`, when given), pinned
        while the block runs; raises BundleError if unusable."""
        return self.cache.use(bundle_id, resolved)

    # -- REST and CLI views ------------------------------------------------------------------

    def summary(self, bundle_id: str | None) -> dict[str, Any] | None:
        """What a tool's GET shows about its bundle."""
        if bundle_id is None:
            return None
        record = self.store.get(bundle_id)
        if record is None:
            return {"id": bundle_id, "status": "missing"}
        return summary_json(record)

    def retry(self, bundle_id: str) -> BundleRecord:
        record = self.store.retry(bundle_id)
        self.scheduler.schedule(record.id)
        return record

    def resume(self, *, orphans: bool = False) -> list[str]:
        """Schedule every pending bundle again (a restarted `kiln dev` picks up its queue).

        With `orphans`, builds left `building` are started over too: right only when no
        other process can be building them (`kiln dev` on its own emulator).
        """
        queued = []
        for record in self.store.list():
            if orphans and record.status == "building":
                with contextlib.suppress(BundleStateError):
                    record = self.store.requeue_orphan(record)
            if record.status == "pending":
                self.scheduler.schedule(record.id)
                queued.append(record.id)
        return queued


def summary_json(record: BundleRecord) -> dict[str, Any]:
    return {
        "id": record.id,
        "status": record.status,
        "target": record.target,
        "requirements": list(record.requirements),
        "created_at": record.created_at,
        "started_at": record.started_at,
        "finished_at": record.finished_at,
        "error": record.error,
        "size": record.size,
        "unpacked_size": record.unpacked_size,
    }


def make_bundles(
    settings: BundleSettings,
    clients: AwsClients,
    *,
    scheduler: BuildScheduler | None = None,
    cache_root: Path | None = None,
) -> Bundles:
    """Bundles for an app built from its `BundleSettings` and `AwsClients`."""
    store = BundleStore(clients.dynamodb, clients.s3, table=settings.table, bucket=settings.bucket)
    python_target = default_target(
        "python", configured=settings.bundle_target, in_lambda=settings.in_lambda
    )
    node_target = default_target(
        "node", configured=settings.node_bundle_target, node_binary=settings.node_binary
    )
    budget_mb = settings.bundle_cache_mb

    def unpacked() -> BundleCache:
        from kiln.bundles.cache import DEFAULT_BUDGET_BYTES, BundleCache

        return BundleCache(
            store,
            root=cache_root or settings.bundle_cache_dir,
            budget_bytes=int(budget_mb * 2**20) if budget_mb else DEFAULT_BUDGET_BYTES,
            targets=(python_target, node_target),
        )

    # Made (its folder under /tmp, its inotify watch) by the first bundle used or built: a
    # process that lists tools never unpacks one (~4 ms of a cold start: bench/coldstart).
    cache = lazy(unpacked, threading.Lock())
    if scheduler is None:
        scheduler = _scheduler(settings, clients, store, cache)
    return Bundles(store, scheduler, cache, python_target=python_target, node_target=node_target)


def _scheduler(
    settings: BundleSettings, clients: AwsClients, store: BundleStore, cache: BundleCache
) -> BuildScheduler:
    if settings.builder_function:
        session = clients.session
        lambda_client = (
            session.client("lambda", region_name=settings.region)
            if session is not None
            else _boto3_lambda(settings.region)
        )
        return LambdaBuildScheduler(lambda_client, settings.builder_function)
    if settings.in_lambda:
        return NoBuilder()
    from kiln.bundles.build import Toolchain  # the builder: never loaded inside Lambda

    # Built here, called here: the cache takes each build as it is made (no download).
    return LazyLocalWorker(store, Toolchain.from_settings(settings), adopt=cache)


def _boto3_lambda(region: str | None) -> Any:
    import boto3

    return boto3.client("lambda", region_name=region)


class LazyLocalWorker:
    """A LocalBuildWorker whose thread starts with the first build (most apps never build)."""

    def __init__(
        self, store: BundleStore, toolchain: Toolchain | None = None, adopt: Adopter | None = None
    ) -> None:
        self.worker = LocalBuildWorker(store, toolchain=toolchain, adopt=adopt)

    def schedule(self, bundle_id: str) -> None:
        self.worker.start()
        self.worker.schedule(bundle_id)

    def wait_idle(self, timeout: float) -> bool:
        return self.worker.wait_idle(timeout)
