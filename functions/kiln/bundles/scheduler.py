"""Who builds a bundle, and when: never inside a request.

`kiln dev` runs a LocalBuildWorker (background threads in the same process); in AWS the
admin function hands bundle ids to the builder function with an asynchronous invoke, and
the builder runs `handle_build_event`. Both end in `run_build`, the one place that moves a
bundle through pending -> building -> ready | failed and publishes its files.
"""

from __future__ import annotations

import functools
import json
import logging
import queue
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from kiln.bundles import build_cache
from kiln.bundles.errors import BuildError
from kiln.bundles.resolved import described
from kiln.bundles.store import (
    BundleRecord,
    BundleStateError,
    BundleStore,
    is_stale,
    log_key,
    manifest_key,
    zip_key,
)

if TYPE_CHECKING:
    from mypy_boto3_lambda import LambdaClient

    # The builder (pip, uv, bun, tomllib): only a build loads it (run_build), never a
    # process that only schedules or serves bundles.
    from kiln.bundles.build import BuildOutput, Progress, Toolchain
    from kiln.bundles.contents import Contents  # zips and trees: a build's, not a start's

logger = logging.getLogger(__name__)

UploadProgress = Callable[[int, int], None]  # (bytes just sent, total bytes)


class Adopter(Protocol):
    """This process's bundle cache, taking a fresh build (kiln.bundles.cache.BundleCache)."""

    def adopt_tree(self, record: BundleRecord, built: Contents) -> bool: ...

    def adopt(self, record: BundleRecord, zip_path: Path) -> bool: ...

    def discard(self, bundle_id: str) -> None: ...

    def settle(self, record: BundleRecord) -> None: ...


class BuildScheduler(Protocol):
    def schedule(self, bundle_id: str) -> None: ...


def request_bundle(
    store: BundleStore,
    scheduler: BuildScheduler,
    language: str,
    target: str,
    requirements: Sequence[str],
) -> BundleRecord | None:
    """What a catalog save calls: record the bundle if new and start its build if pending.

    Saving a tool whose bundle failed (or whose builder died, or whose zip is gone) tries the
    build again: the author saving is the moment a fix or a transient failure gets its second
    chance.
    """
    record = store.ensure(language, target, requirements)
    if record is None:
        return None
    missing = record.status == "ready" and not store.zip_exists(record.id)
    if record.status == "failed" or is_stale(record) or missing:
        try:
            record = store.retry(record.id)
        except BundleStateError:  # another save retried it first
            record = store.get(record.id) or record
    if record.status == "pending":
        scheduler.schedule(record.id)
    return record


def run_build(
    store: BundleStore,
    bundle_id: str,
    *,
    workdir: Path | None = None,
    progress: Progress | None = None,
    upload_progress: UploadProgress | None = None,
    toolchain: Toolchain | None = None,
    adopt: Adopter | None = None,
    released: Callable[[], None] | None = None,
) -> BundleRecord:
    """Build and publish one pending bundle. A bundle not pending is returned as it is.

    With `adopt` (a builder in the serving process), the built files are handed to that
    process's bundle cache as copies before the zip is written and uploaded (or, where
    they cannot be copied, the zip is unpacked into it while it uploads), so the tool's calls
    in this process find it there from then on; the record says ready once the zip is in the
    bucket, as for any other builder. `released` is called once the files are handed over
    (the package folders are in place: a next build may start) or the build has ended."""
    try:
        record = store.mark_building(bundle_id)
    except BundleStateError:
        current = store.get(bundle_id)
        if current is None:
            raise
        return current
    from kiln.bundles.build import build_bundle

    scratch = Path(tempfile.mkdtemp(prefix=f"kiln-build-{bundle_id[:8]}-", dir=workdir))
    handing = _HandOver(adopt, record, released)
    cache = toolchain.cache_dir if toolchain is not None else None
    try:
        try:
            with build_cache.in_use(cache):  # no trim empties it under this build
                output = build_bundle(
                    record, workdir=scratch, progress=progress, toolchain=toolchain,
                    hand_over=handing if adopt is not None or released is not None else None,
                )  # fmt: skip
        except Exception as exc:  # the builder's own bug must still end the build
            handing.abandon()
            return _failed(store, bundle_id, exc)
        if progress:
            progress(f"uploading {output.manifest['zip_size'] / 2**20:.1f} MB")
        adopting = None
        if not handing.done:  # not copied: unpacked from the zip while it uploads
            adopting = _adopt_beside(adopt, record, output.manifest, output.zip_path)
        try:
            _publish(store, bundle_id, output, upload_progress)
        except BaseException:
            handing.abandon()  # not published: no call may use what was handed over
            raise
        if adopting is not None:
            adopting.join()  # unpacked before anyone can see it ready
        return handing.published(store.mark_ready(bundle_id, output.manifest))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        if released is not None:
            released()
        if toolchain is not None:  # the bundle is out: the cache's budget is kept after it
            _trim(toolchain)


def _trim(toolchain: Toolchain) -> None:
    budget_mb = toolchain.cache_budget_mb or build_cache.DEFAULT_BUDGET_MB
    try:
        build_cache.after_build(toolchain.cache_dir, int(budget_mb * 2**20))
    except OSError:  # the next build tries again; this one is published either way
        logger.exception("could not empty the build cache %s", toolchain.cache_dir)


def _failed(store: BundleStore, bundle_id: str, exc: Exception) -> BundleRecord:
    """The build ends failed, its log (or the crash) kept."""
    if isinstance(exc, BuildError):
        _put_text(store, log_key(bundle_id), exc.log)
        return store.mark_failed(bundle_id, exc.reason, log_key(bundle_id))
    logger.exception("bundle %s: build crashed", bundle_id)
    reason = f"the builder crashed: {type(exc).__name__}: {exc}"
    _put_text(store, log_key(bundle_id), reason + "\n")
    return store.mark_failed(bundle_id, reason, log_key(bundle_id))


def _publish(
    store: BundleStore, bundle_id: str, output: BuildOutput, upload: UploadProgress | None
) -> None:
    """The zip, its manifest and its log into the bucket."""
    store.s3.upload_file(
        str(output.zip_path),
        store.bucket,
        zip_key(bundle_id),
        ExtraArgs={"ContentType": "application/zip"},
        Callback=None
        if upload is None
        else functools.partial(_sent, upload, int(output.manifest["zip_size"])),
    )
    store.s3.put_object(
        Bucket=store.bucket,
        Key=manifest_key(bundle_id),
        Body=json.dumps(output.manifest, indent=2).encode(),
        ContentType="application/json",
    )
    _put_text(store, log_key(bundle_id), output.log)


class _HandOver:
    """Gives the built files to this process's bundle cache before the build writes its zip
    (BundleCache.adopt_tree): from then on the tool can be called here."""

    def __init__(
        self, adopt: Adopter | None, record: BundleRecord, released: Callable[[], None] | None
    ) -> None:
        self.adopt, self.record, self.released = adopt, record, released
        self.done = False

    def __call__(self, built: Contents) -> None:
        try:
            if self.adopt is not None:
                record = replace(self.record, unpacked_size=built.unpacked)
                self.done = self.adopt.adopt_tree(record, built)
        except Exception:  # an optimisation: the zip is unpacked instead
            logger.warning("bundle %s: not handed over", self.record.id, exc_info=True)
        finally:
            if self.released is not None:
                self.released()

    def published(self, ready: BundleRecord) -> BundleRecord:
        """The build is out: what was handed over is that build (BundleCache.settle)."""
        if self.done and self.adopt is not None:
            self.adopt.settle(ready)
        return ready

    def abandon(self) -> None:
        """The build failed after its files were handed over: the cache lets them go."""
        if self.done and self.adopt is not None:
            self.adopt.discard(self.record.id)
            self.done = False


def _adopt_beside(
    adopt: Adopter | None, record: BundleRecord, manifest: Mapping[str, Any], zip_path: Path
) -> threading.Thread | None:
    """Start `adopt` on a thread of its own (it unpacks while the zip uploads)."""
    if adopt is None:
        return None
    built = replace(record, sha256=str(manifest["zip_sha256"]),
                    unpacked_size=int(manifest["unpacked_size"]),
                    resolved_sha256=_resolved_of(manifest))  # fmt: skip

    def run() -> None:
        try:
            adopt.adopt(built, zip_path)
        except Exception:  # an optimisation: the first call downloads it instead
            logger.warning("bundle %s: not unpacked from its build", record.id, exc_info=True)

    thread = threading.Thread(target=run, name=f"kiln-adopt-{record.id[:8]}", daemon=True)
    thread.start()
    return thread


def _resolved_of(manifest: Mapping[str, Any]) -> str | None:
    """What a build's manifest says it resolved to (as its record will, once ready)."""
    lock = manifest.get("lock")
    return None if lock is None else described(manifest["language"], lock)["resolved_sha256"]


def _sent(upload_progress: UploadProgress, total: int, amount: int) -> None:
    upload_progress(amount, total)


def _put_text(store: BundleStore, key: str, text: str) -> None:
    store.s3.put_object(
        Bucket=store.bucket, Key=key, Body=text.encode(), ContentType="text/plain; charset=utf-8"
    )


class LocalBuildWorker:
    """Builds scheduled bundles on background threads (kiln dev, tests)."""

    def __init__(
        self,
        store: BundleStore,
        *,
        threads: int = 1,
        workdir: Path | None = None,
        progress: Callable[[str, str], None] | None = None,
        toolchain: Toolchain | None = None,
        adopt: Adopter | None = None,
    ) -> None:
        self.store = store
        self.workdir = workdir
        self.toolchain = toolchain
        self.adopt = adopt  # this process's bundle cache takes each build (run_build)
        self.progress = progress or _log_progress  # (bundle id, message)
        self.builds_started = 0  # builds this worker ran (counted for tests and logs)
        self._threads_wanted = threads
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._queued: set[str] = set()
        self._active = 0
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._threads: list[threading.Thread] = []
        self._builds: list[threading.Thread] = []  # each build's own, zip and upload included

    def start(self) -> LocalBuildWorker:
        with self._lock:
            if self._threads:
                return self
            for number in range(self._threads_wanted):
                thread = threading.Thread(
                    target=self._loop, name=f"kiln-bundle-builder-{number}", daemon=True
                )
                thread.start()
                self._threads.append(thread)
        return self

    def stop(self, timeout: float = 30.0) -> None:
        """Finish the build in hand, drop the queue, and join the threads."""
        with self._lock:
            threads, self._threads = self._threads, []
            self._queued.clear()
        for _ in threads:
            self._queue.put(None)
        for thread in threads:
            thread.join(timeout)
        with self._lock:
            builds, self._builds = self._builds, []
        for build in builds:
            build.join(timeout)

    def schedule(self, bundle_id: str) -> None:
        with self._lock:
            if bundle_id in self._queued:
                return
            self._queued.add(bundle_id)
        self._queue.put(bundle_id)

    def wait_idle(self, timeout: float) -> bool:
        """Wait until nothing is queued or building; False at the deadline."""
        deadline = time.monotonic() + timeout
        with self._idle:
            while self._queued or self._active:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._idle.wait(left)
        return True

    def _loop(self) -> None:
        """Takes the next bundle once the one before has handed its files over (or ended):
        its zip and upload go on beside the next build, whose packages are in place by then."""
        while True:
            bundle_id = self._queue.get()
            if bundle_id is None:
                return
            with self._lock:
                if bundle_id not in self._queued:  # dropped by stop()
                    continue
                self._active += 1
            released = threading.Event()
            build = threading.Thread(
                target=self._build, args=(bundle_id, released), name=f"kiln-build-{bundle_id[:8]}"
            )
            with self._lock:
                self._builds = [b for b in self._builds if b.is_alive()] + [build]
            build.start()
            released.wait()

    def _build(self, bundle_id: str, released: threading.Event) -> None:
        try:
            record = self.store.get(bundle_id)
            if record is not None and record.status == "pending":
                with self._lock:
                    self.builds_started += 1
                result = run_build(
                    self.store,
                    bundle_id,
                    workdir=self.workdir,
                    progress=functools.partial(self.progress, bundle_id),
                    toolchain=self.toolchain,
                    adopt=self.adopt,
                    released=released.set,
                )
                if result.status == "failed":  # why, in the server's log too
                    logger.warning("bundle %s: failed: %s", bundle_id, result.error)
                else:
                    logger.info("bundle %s: %s", bundle_id, result.status)
        except Exception:
            logger.exception("bundle %s: build did not finish", bundle_id)
        finally:
            released.set()
            with self._idle:
                self._active -= 1
                self._queued.discard(bundle_id)
                self._idle.notify_all()


def _log_progress(bundle_id: str, message: str) -> None:
    logger.info("bundle %s: %s", bundle_id, message)


class LambdaBuildScheduler:
    """Hands a bundle id to the builder function with an asynchronous invoke."""

    def __init__(self, lambda_client: LambdaClient, function_name: str) -> None:
        self.lambda_client = lambda_client
        self.function_name = function_name

    def schedule(self, bundle_id: str) -> None:
        self.lambda_client.invoke(
            FunctionName=self.function_name,
            InvocationType="Event",
            Payload=json.dumps({"bundle_id": bundle_id}).encode(),
        )


def handle_build_event(
    event: Mapping[str, Any],
    context: Any,
    *,
    store: BundleStore,
    workdir: Path | None = None,
    toolchain: Toolchain | None = None,
) -> dict[str, Any]:
    """The builder function's work: build the bundle(s) named in the event.

    Accepts `{"bundle_id": ID}` or `{"bundle_ids": [ID, ...]}`; answers each bundle's status.
    """
    ids = list(event.get("bundle_ids") or [])
    if event.get("bundle_id"):
        ids.append(event["bundle_id"])
    if not ids or not all(isinstance(i, str) and i for i in ids):
        raise ValueError('the builder needs {"bundle_id": "<id>"} or {"bundle_ids": [...]}')
    results: dict[str, dict[str, Any]] = {}
    for bundle_id in ids:
        try:
            record = run_build(store, bundle_id, workdir=workdir, toolchain=toolchain)
        except BundleStateError as error:  # no such bundle: nothing to retry either
            logger.warning("builder: %s", error)
            results[bundle_id] = {"status": "missing", "error": str(error)}
            continue
        results[bundle_id] = {"status": record.status, "error": record.error}
    return {"bundles": results}
