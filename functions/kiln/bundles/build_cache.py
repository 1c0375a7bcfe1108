"""The build cache's disk budget: emptied once it has outgrown it, never under a build.

The build cache (`KILN_BUILD_CACHE_DIR`: uv's downloads and lookups, the package folders of
`kiln.bundles.layers`, pip's and Bun's caches) only makes builds faster, and it only grows:
a builder that lives long enough with many different packages would fill its storage (the
builder function's 4 GB of `/tmp`, the disk of `kiln dev`'s state directory) and every build
after would fail for want of space.

A build holds the cache (`in_use`: a shared flock on `<cache>/.in-use`) from its first
command to its zip. After the build has been published, the builder measures the cache
(`trim`): after its first build, every `CHECK_EVERY` builds, and after any build that leaves
less free space on the cache's filesystem than the budget (measuring walks every file: ~25 µs
each here, 0.7 s for a cache of 30,000 files, too much to pay after every build). Past its
budget (`KILN_BUILD_CACHE_MB`, 2,048 MB by default) it takes the lock
exclusively without waiting, so a build still using the cache, in this process or another,
puts the trim off to the end of the next build, and empties the cache: every entry is renamed
into `.trash` at once, then removed. The next build runs cold (its packages fetched,
compiled and compressed again: a few seconds for a tool with boto3). Emptying everything
rather than the least recently used packages is deliberate: uv's cache has no per-package
order to trim by, and a cache emptied now and then keeps no package an index has withdrawn.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

log = logging.getLogger(__name__)

DEFAULT_BUDGET_MB = 2048
CHECK_EVERY = 10  # builds between two measurements, while the disk has room
LOCK = ".in-use"
TRASH = ".trash"
_since: dict[Path, int] = {}  # cache -> builds in this process since it was last measured
_since_lock = threading.Lock()


@contextlib.contextmanager
def in_use(cache_dir: Path | None) -> Iterator[None]:
    """Hold the cache for one build: no `trim` empties it meanwhile (waits for one that is)."""
    if cache_dir is None:
        yield
        return
    from kiln.bundles.cache import flock  # the unpacked bundles' cache: not at a cold start

    cache_dir.mkdir(parents=True, exist_ok=True)
    with flock(cache_dir / LOCK, fcntl.LOCK_SH):
        yield


def after_build(cache_dir: Path | None, budget_bytes: int) -> int:
    """`trim` when it is due (see the module doc); the bytes it freed. A trim put off by a
    build that holds the cache stays due: the next build's end tries again."""
    if cache_dir is None or not cache_dir.is_dir():
        return 0
    with _since_lock:
        builds = _since.get(cache_dir, CHECK_EVERY) + 1  # never measured here: due now
        due = builds >= CHECK_EVERY
        _since[cache_dir] = 0 if due else builds
    if not due and shutil.disk_usage(cache_dir).free >= budget_bytes:
        return 0
    freed = trim(cache_dir, budget_bytes)
    with _since_lock:
        _since[cache_dir] = CHECK_EVERY if freed is None else 0
    return freed or 0


def trim(cache_dir: Path | None, budget_bytes: int) -> int | None:
    """Empty the cache if it holds more than `budget_bytes` and no build holds it; the bytes
    it held when emptied, 0 when it is within its budget, None when a build held it."""
    if cache_dir is None or not cache_dir.is_dir():
        return 0
    used = size_of(cache_dir)
    if used <= budget_bytes:
        return 0
    from kiln.bundles.cache import flock

    trash = cache_dir / TRASH
    with flock(cache_dir / LOCK, fcntl.LOCK_EX | fcntl.LOCK_NB) as alone:
        if not alone:
            return None
        doomed = trash / uuid.uuid4().hex
        doomed.mkdir(parents=True)
        with os.scandir(cache_dir) as entries:
            for entry in entries:
                if entry.name not in (LOCK, TRASH):
                    os.rename(entry.path, doomed / entry.name)
    shutil.rmtree(trash, ignore_errors=True)
    log.info(
        "emptied the build cache %s: it held %.0f MB, past its budget of %.0f MB "
        "(KILN_BUILD_CACHE_MB); the next build fetches its packages again",
        cache_dir, used / 2**20, budget_bytes / 2**20,
    )  # fmt: skip
    return used


def size_of(folder: Path) -> int:
    """Bytes in the files under `folder` (links not followed, each hard link counted once)."""
    total, seen, pending = 0, set(), [str(folder)]
    while pending:
        for entry in _entries(pending.pop()):
            if entry.is_dir(follow_symlinks=False):
                pending.append(entry.path)
                continue
            if not entry.is_file(follow_symlinks=False):
                continue
            info = entry.stat(follow_symlinks=False)
            if info.st_nlink > 1 and (info.st_dev, info.st_ino) in seen:
                continue
            seen.add((info.st_dev, info.st_ino))
            total += info.st_size
    return total


def _entries(folder: str) -> list[os.DirEntry[str]]:
    """A folder's entries; none for one that went away or cannot be listed."""
    try:
        with os.scandir(folder) as entries:
            return list(entries)
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        return []
