"""Ready bundles, downloaded once per process and unpacked once per machine under /tmp.

Layout under `root` (default `<tmp>/kiln-bundles-<uid>`, made and checked by Kiln: see
`kiln.bundles.owned_dirs`):

    <id>/              a complete bundle; it appears only by an atomic rename
    .tmp/              downloads and half-unpacked folders, never used by a run
    .locks/<id>.lock   flock: exclusive while unpacking or evicting, shared while in use
    .trash/            evicted bundles on their way out

Ten threads (or processes) asking for the same new bundle at once unpack it once: a per-bundle
threading lock inside the process, and the bundle's flock across processes. After the first
call a process answers from memory: no S3 or DynamoDB request, one `stat`.

A bundle's files are read-only (0444, 0555 if executable), its folders 0755, however it
arrived: unpacked from its zip, or handed over by a builder in this process as copies of
what it built (`adopt_tree`, `kiln dev`: copies, never hard links, so no `chmod` of the build
cache reaches them). Runs read them through a read-only mount, as another uid, or under a
Landlock fence that allows reading only; with none of those (one uid, no fence) a tool may
still change a file's mode and write it. So a process serves a folder only while its `Seal`
holds (`kiln.bundles.seal`: an inotify queue read per call, or one `lstat` per file where
there is no inotify); a folder it did not make itself,
or whose seal broke, is first checked against the published zip (sizes, CRC-32, modes, one
link each, nothing more) and, if it is not that, made again from the zip.

A bundle id names requirements, not one build: a rebuild (its zip lost) may resolve them to
other versions. A caller that knows which build it was told of (`resolved`: the digest its
served fingerprint names, catalog/packages.py) is never served another: a folder of another
build is checked against the record's zip again (and made again from it), and a record that
is not that build either refuses the run (status "changed") until the caller reads it anew.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import shutil
import stat
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Collection, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

from kiln.bundles.errors import BundleError as BundleError  # the cache's errors, also here
from kiln.bundles.errors import BundleFetchError as BundleFetchError
from kiln.bundles.errors import BundleNotReadyError as BundleNotReadyError
from kiln.bundles.folders import finish, remove, size_of, swap_contents, unpack
from kiln.bundles.owned_dirs import owned_directory, temp_place
from kiln.bundles.seal import DIR_MODE, Seal, Watch, check_against
from kiln.bundles.seal import SIZE_FILE as SIZE_FILE  # where a bundle's size is kept
from kiln.bundles.store import BundleRecord, BundleStore, parse_iso

logger = logging.getLogger(__name__)

DEFAULT_BUDGET_BYTES = 300 * 1024 * 1024  # leaves room in Lambda's default 512 MB /tmp
STALE_TMP_AFTER_S = 600.0  # no live download or unpack takes this long
_CHUNK = 1024 * 1024


class Linkable(Protocol):
    """A build's installed files, as kiln.bundles.contents has them."""

    unpacked: int

    def copy_into(self, dest: Path) -> int: ...


# A bundle in these states becomes ready without anyone acting: a call now is early, not wrong.
BUILDING = ("pending", "building")

# What any caller reads of packages that will not be ready by themselves: one line, nothing of
# the build (its log may name private indexes, paths, versions) and no author's command.
FAILED_FOR_CALLERS = "this tool's packages failed to build; its author has been told."
GONE_FOR_CALLERS = "this tool's packages are missing; its author has been told."
# The caller was told of one build, and the record names another (rebuilt since it read it).
CHANGED = (
    "its packages were rebuilt since this server last read the catalog, and resolved to "
    "other versions; list the tools again, check the new fingerprint and call it again."
)


def not_ready_error(record: BundleRecord | None, bundle_id: str) -> BundleNotReadyError:
    """The error of a call whose tool's packages cannot be used yet: its message for any
    caller, its `for_author` with the build's error and what to do."""
    author = not_ready_message(record, bundle_id)
    if record is None:
        return BundleNotReadyError(GONE_FOR_CALLERS, bundle_id=bundle_id, status=None,
                                   for_author=author)  # fmt: skip
    message = FAILED_FOR_CALLERS if record.status == "failed" else author
    return BundleNotReadyError(message, bundle_id=bundle_id, status=record.status,
                               for_author=author)  # fmt: skip


def not_ready_message(record: BundleRecord | None, bundle_id: str) -> str:
    """What the tool's author reads when its packages cannot be used yet (callers read the
    same while they are queued or building, one line otherwise: `not_ready_error`)."""
    if record is None:
        return (
            f"its packages (bundle {bundle_id}) are not in the catalog; save the tool again "
            "to rebuild them."
        )
    if record.status == "failed":
        return (
            f"its packages ({', '.join(record.requirements)}) failed to build: "
            f"{record.error or 'no reason recorded'}. Fix the requirements and save the tool "
            f"again, or retry the build (kiln bundles retry {record.id})."
        )
    if record.status == "building":
        since = record.started_at or record.updated_at
        return (
            f"its packages ({', '.join(record.requirements)}) are being built, since "
            f"{since} ({_age(since)}); try again in a moment."
        )
    return (
        f"its packages ({', '.join(record.requirements)}) are queued to be built, "
        f"since {record.updated_at} ({_age(record.updated_at)}); try again in a moment."
    )


def _age(stamp: str) -> str:
    seconds = max(0, int((datetime.now(UTC) - parse_iso(stamp)).total_seconds()))
    return f"{seconds} s ago" if seconds < 120 else f"{seconds // 60} min ago"


class BundleCache:
    """Maps a ready bundle id to a folder to put on PYTHONPATH / NODE_PATH."""

    def __init__(
        self,
        store: BundleStore,
        *,
        root: Path | None = None,
        budget_bytes: int = DEFAULT_BUDGET_BYTES,
        targets: Collection[str] = (),
        watch: bool = True,
    ) -> None:
        self.store = store
        # The targets this process can load; a bundle built for another (a function moved to
        # arm64, say) is refused with a message instead of failing inside the tool.
        self.targets = frozenset(targets)
        # Kiln's own, checked (owned_dirs): another user must not plant a bundle in it.
        self.root = owned_directory(root) if root else temp_place("kiln-bundles")
        self.budget_bytes = budget_bytes
        self.downloads = 0  # S3 downloads this process made
        self.unpacks = 0  # bundles this process unpacked
        self.handovers = 0  # bundles this process's builder handed over as links
        self.evictions = 0
        self.repairs = 0  # bundles found changed on disk and made again from their zip
        self._known: OrderedDict[str, int] = OrderedDict()  # id -> unpacked bytes, LRU order
        self._seals: dict[str, Seal] = {}  # id -> the folder as this process last checked it
        self._builds: dict[str, str | None] = {}  # id -> what that folder's build resolved to
        self._watched: set[str] = set()  # sealed bundles inotify watches (the rest: lstat)
        self._watch = Watch(enabled=watch)  # off: every use checks with `Seal.holds`
        self._pins: dict[str, int] = {}
        self._guard = threading.Lock()
        self._id_locks: dict[str, threading.Lock] = {}
        for sub in (".tmp", ".locks", ".trash"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        self._sweep()

    # -- public ----------------------------------------------------------------------------

    def path_for(self, bundle_id: str, resolved: str | None = None) -> Path:
        """The bundle's folder, downloading and unpacking it on first use; with `resolved`,
        only the build that resolved to that digest (module docstring).

        Raises BundleNotReadyError (pending, building, failed, changed, unknown) or
        BundleFetchError. Prefer `use()` around a run: a folder in use is never evicted.
        """
        path = self._warm(bundle_id, resolved)
        return path if path is not None else self._fetch(bundle_id, resolved)

    @contextlib.contextmanager
    def use(self, bundle_id: str, resolved: str | None = None) -> Iterator[Path]:
        """`path_for`, and the bundle stays pinned (never evicted) until the block ends."""
        with self._guard:
            self._pins[bundle_id] = self._pins.get(bundle_id, 0) + 1
        try:
            while True:
                path = self.path_for(bundle_id, resolved)
                with flock(self._lock_path(bundle_id), fcntl.LOCK_SH):
                    # Another process may have evicted it between the two steps.
                    if path.is_dir():
                        yield path
                        return
        finally:
            with self._guard:
                self._pins[bundle_id] -= 1
                if not self._pins[bundle_id]:
                    del self._pins[bundle_id]

    def adopt(self, record: BundleRecord, zip_path: Path) -> bool:
        """Unpack a bundle this process has just built from its own zip, before the store
        has it (a builder in the serving process: `kiln dev`), so that its first call
        downloads and unpacks nothing. False when it is for another target, already here,
        or the zip is not the one recorded. The same locks as a download: safe beside one."""
        if self.targets and record.target not in self.targets:
            return False
        _check_id(record.id)
        with self._id_lock(record.id), flock(self._lock_path(record.id), fcntl.LOCK_EX):
            final = self.root / record.id
            if final.is_dir():
                return False
            if record.sha256 and _file_sha256(zip_path) != record.sha256:
                return False
            self._make_room(record.unpacked_size or 0, keep=record.id)
            tmp = self.root / ".tmp" / f"{record.id}.{os.getpid()}.{uuid.uuid4().hex[:8]}.dir"
            try:
                size = unpack(zip_path, tmp)
                os.rename(tmp, final)
            finally:
                remove(tmp)
            self.unpacks += 1
            self._remember(record.id, size, Seal.of(final), record.resolved_sha256)
        return True

    def adopt_tree(self, record: BundleRecord, built: Linkable) -> bool:
        """Take a bundle this process is building as copies of its installed files (no zip,
        no unpack: `kiln dev`'s builder, while the zip is written and uploaded). False when
        it is for another target, already here, or the files could not be copied or did
        not match what the zip is made of; the zip is then unpacked instead (`adopt`)."""
        if self.targets and record.target not in self.targets:
            return False
        _check_id(record.id)
        with self._id_lock(record.id), flock(self._lock_path(record.id), fcntl.LOCK_EX):
            if (self.root / record.id).is_dir():
                return False
            self._make_room(built.unpacked, keep=record.id)
            tmp = self.root / ".tmp" / f"{record.id}.{os.getpid()}.{uuid.uuid4().hex[:8]}.dir"
            try:
                size = built.copy_into(tmp)
                finish(tmp, size)
                os.rename(tmp, self.root / record.id)
            except (OSError, ValueError) as error:  # ValueError: a file that did not match
                logger.info("bundle %s: not copied from its build (%s)", record.id, error)
                return False
            finally:
                remove(tmp)
            self.handovers += 1
            self._remember(record.id, size, Seal.of(self.root / record.id), record.resolved_sha256)
        return True

    def settle(self, record: BundleRecord) -> None:
        """The build this process handed over (`adopt_tree`, before it knew what the build
        resolved to) was published as `record`: its folder is that build."""
        with self._guard:
            if record.id in self._seals:
                self._builds[record.id] = record.resolved_sha256

    def discard(self, bundle_id: str) -> None:
        """Let a bundle go that was taken from a build which then failed to publish."""
        _check_id(bundle_id)
        self._forget(bundle_id)
        entry = self.root / bundle_id
        if entry.is_dir():
            self._evict(entry)

    def cached_ids(self) -> list[str]:
        """Bundles unpacked under root, least recently used first."""
        return [entry.name for entry in self._entries()]

    def used_bytes(self) -> int:
        return sum(size_of(entry) for entry in self._entries())

    def remove_strangers(self) -> int:
        """Remove every entry of the cache that this process did not make or check: for a
        process that is the cache's only user (the runner function, between two runs).
        Returns how many went."""
        os.chmod(self.root, DIR_MODE)  # a run of this uid may have closed it, or replaced
        for sub in (".tmp", ".locks", ".trash"):  # one of these by a link elsewhere
            place = self.root / sub
            if place.is_symlink() or not place.is_dir():
                remove(place)
                place.mkdir()
            os.chmod(place, DIR_MODE)
        with self._guard:
            ours = {*self._seals, ".tmp", ".locks", ".trash"}
            locks = {f"{bundle_id}.lock" for bundle_id in self._seals}
        strangers = [entry for entry in self.root.iterdir() if entry.name not in ours]
        for emptied in (".tmp", ".trash"):
            strangers += list((self.root / emptied).iterdir())
        strangers += [
            e for e in (self.root / ".locks").iterdir() if e.name not in locks or not _plain(e)
        ]
        for entry in strangers:
            remove(entry)
        return len(strangers)

    def _sweep(self) -> None:
        """Remove what dead processes left: evictions they did not finish, old downloads."""
        for leftover in (self.root / ".trash").iterdir():
            remove(leftover)
        cutoff = time.time() - STALE_TMP_AFTER_S
        for leftover in (self.root / ".tmp").iterdir():
            with contextlib.suppress(FileNotFoundError):
                if leftover.stat().st_mtime < cutoff:
                    remove(leftover)

    # -- internals -------------------------------------------------------------------------

    def _warm(self, bundle_id: str, resolved: str | None = None) -> Path | None:
        for changed in self._watch.changed():
            self._forget(changed)
            logger.warning("bundle %s changed on disk", changed)
        with self._guard:
            seal = self._seals.get(bundle_id)
            if seal is None or (resolved and self._builds.get(bundle_id) != resolved):
                return None
            watched = bundle_id in self._watched
            self._known.move_to_end(bundle_id)
        path = self.root / bundle_id
        try:
            os.utime(path)  # cross-process recency for eviction; also proves it exists
        except FileNotFoundError:
            self._forget(bundle_id)
            return None
        if not (seal.root_holds() if watched else seal.holds()):
            logger.warning("bundle %s changed on disk since it was checked; checking it "
                           "against its zip before any run uses it", bundle_id)  # fmt: skip
            self._forget(bundle_id)
            return None
        return path

    def _forget(self, bundle_id: str) -> None:
        with self._guard:
            self._known.pop(bundle_id, None)
            self._seals.pop(bundle_id, None)
            self._builds.pop(bundle_id, None)
            self._watched.discard(bundle_id)
        self._watch.drop(bundle_id)

    def _id_lock(self, bundle_id: str) -> threading.Lock:
        with self._guard:
            return self._id_locks.setdefault(bundle_id, threading.Lock())

    def _lock_path(self, bundle_id: str) -> Path:
        return self.root / ".locks" / f"{bundle_id}.lock"

    def _fetch(self, bundle_id: str, resolved: str | None = None) -> Path:
        _check_id(bundle_id)
        with self._id_lock(bundle_id):
            warm = self._warm(bundle_id, resolved)
            if warm is not None:
                return warm
            with flock(self._lock_path(bundle_id), fcntl.LOCK_EX):
                final = self.root / bundle_id
                record = self._ready_record(bundle_id)
                if resolved and record.resolved_sha256 != resolved:
                    raise BundleNotReadyError(CHANGED, bundle_id=bundle_id, status="changed")
                if os.path.lexists(final):  # another process, or an earlier one, made it
                    self._check_or_repair(record, final)
                    os.utime(final)
                    return final
                # The budget is for unpacked bundles; the zip is deleted once unpacked.
                self._make_room(record.unpacked_size or 0, keep=bundle_id)
                size = self._download_andunpack(record, final)
                self._remember(bundle_id, size, Seal.of(final), record.resolved_sha256)
        self._make_room(0, keep=bundle_id)
        return final

    def _ready_record(self, bundle_id: str) -> BundleRecord:
        record = self.store.get(bundle_id)
        if record is None or record.status != "ready":
            raise not_ready_error(record, bundle_id)
        if self.targets and record.target not in self.targets:
            raise BundleNotReadyError(
                f"its packages were built for {record.target}, but this server runs "
                f"{' / '.join(sorted(self.targets))}; save the tool again to build them "
                "for it.",
                bundle_id=bundle_id,
                status="wrong_target",
            )
        return record

    def _check_or_repair(self, record: BundleRecord, final: Path) -> None:
        """Seal `final` if it is exactly the published zip; otherwise make it again from
        that zip (under the bundle's exclusive lock: no run of any process is using it).

        Made again in place where it is a folder: its contents are swapped, the folder itself
        stays, so a run prepared beforehand (a standby, whose Landlock rule or read-only
        mount holds that very folder) finds the new contents there."""
        stem = self.root / ".tmp" / f"{record.id}.{os.getpid()}.{uuid.uuid4().hex[:8]}"
        zip_path, fresh, old = stem.with_suffix(".zip"), stem.with_suffix(".dir"), None
        try:
            self._download(record, zip_path)
            problem = check_against(zip_path, final) if final.is_dir() else "not a folder"
            if problem is None:
                self._remember(record.id, size_of(final), Seal.of(final), record.resolved_sha256)
                return
            logger.warning("bundle %s on disk is not what was published (%s); it is made "
                           "again from its zip", record.id, problem)  # fmt: skip
            size = unpack(zip_path, fresh)
            old = self.root / ".trash" / f"{record.id}.{uuid.uuid4().hex[:8]}"
            try:
                swap_contents(final, fresh, old)
            except OSError as error:
                raise BundleFetchError(
                    f"its packages (bundle {record.id}) were changed on disk and could not be "
                    f"made again ({error}); try again, or remove {final}."
                ) from error
            self.repairs += 1
            self._remember(record.id, size, Seal.of(final), record.resolved_sha256)
        finally:
            remove(zip_path)
            remove(fresh)
            if old is not None:
                remove(old)

    def _remember(self, bundle_id: str, size: int, seal: Seal, build: str | None) -> None:
        # Watched from now on; what changed between the seal and the watch is seen once here.
        watched = self._watch.add(bundle_id, seal.paths())
        if watched and not seal.holds():
            self._watch.drop(bundle_id)
            watched = False  # the next use checks it whole, finds the change, and repairs
        with self._guard:
            self._known[bundle_id] = size
            self._known.move_to_end(bundle_id)
            self._seals[bundle_id] = seal
            self._builds[bundle_id] = build
            if watched:
                self._watched.add(bundle_id)

    def _download_andunpack(self, record: BundleRecord, final: Path) -> int:
        tmp = self.root / ".tmp"
        for leftover in tmp.glob(f"{record.id}.*"):  # from a process that died mid-unpack
            remove(leftover)
        stem = tmp / f"{record.id}.{os.getpid()}.{uuid.uuid4().hex[:8]}"
        zip_path, unpack_dir = stem.with_suffix(".zip"), stem.with_suffix(".dir")
        try:
            self._download(record, zip_path)
            size = unpack(zip_path, unpack_dir)
            os.rename(unpack_dir, final)  # the one step that makes a bundle visible
            self.unpacks += 1
            return size
        finally:
            remove(zip_path)
            remove(unpack_dir)

    def _download(self, record: BundleRecord, zip_path: Path) -> None:
        self.downloads += 1
        digest = hashlib.sha256()
        received = 0
        try:
            try:
                response = self.store.s3.get_object(Bucket=self.store.bucket, Key=record.zip_key)
            except self.store.s3.exceptions.NoSuchKey:
                raise BundleNotReadyError(
                    GONE_FOR_CALLERS,
                    bundle_id=record.id,
                    status="missing",
                    for_author=f"its packages (bundle {record.id}) are missing from storage; "
                    f"save the tool again, or run `kiln bundles retry {record.id}`, to build "
                    "them again.",
                ) from None
            body = response["Body"]
            with zip_path.open("wb") as sink:
                for chunk in iter(lambda: body.read(_CHUNK), b""):
                    digest.update(chunk)
                    received += len(chunk)
                    sink.write(chunk)
        except BundleNotReadyError:
            raise
        except Exception as exc:
            raise BundleFetchError(
                f"its packages (bundle {record.id}) could not be downloaded "
                f"({type(exc).__name__}: {exc}); try again."
            ) from exc
        if record.sha256 and digest.hexdigest() != record.sha256:
            raise BundleFetchError(
                f"its packages (bundle {record.id}) arrived damaged ({received} of "
                f"{record.size} bytes, hash mismatch); nothing was unpacked; try again."
            )

    def _entries(self) -> list[Path]:
        entries = [e for e in self.root.iterdir() if not e.name.startswith(".") and e.is_dir()]
        return sorted(entries, key=lambda e: e.stat().st_mtime)

    def _make_room(self, needed: int, *, keep: str) -> None:
        """Evict least recently used bundles, never one in use, until `needed` more fits."""
        entries = [(e, size_of(e)) for e in self._entries()]
        total = sum(size for _, size in entries)
        for entry, size in entries:
            if total + needed <= self.budget_bytes:
                return
            if entry.name == keep:
                continue
            with self._guard:
                if self._pins.get(entry.name):
                    continue
            if self._evict(entry):
                total -= size

    def _evict(self, entry: Path) -> bool:
        with flock(self._lock_path(entry.name), fcntl.LOCK_EX | fcntl.LOCK_NB) as locked:
            if not locked or not entry.is_dir():
                return False
            trash = self.root / ".trash" / f"{entry.name}.{uuid.uuid4().hex[:8]}"
            os.rename(entry, trash)
            self._forget(entry.name)
        shutil.rmtree(trash, ignore_errors=True)
        self.evictions += 1
        return True


@contextlib.contextmanager
def flock(path: Path, operation: int) -> Iterator[bool]:
    """Hold an flock on `path`; yields False when a non-blocking lock is taken elsewhere."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        try:
            fcntl.flock(fd, operation)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as source:
        for chunk in iter(lambda: source.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _plain(path: Path) -> bool:
    return stat.S_ISREG(path.lstat().st_mode)


def _check_id(bundle_id: str) -> None:
    if not bundle_id or not all(c in "0123456789abcdef" for c in bundle_id):
        raise BundleNotReadyError(
            f"{bundle_id!r} is not a bundle id", bundle_id=bundle_id, status=None
        )
