"""A process's in-memory copy of the catalog, kept fresh by one version read per request.

At most one: a request that has read the version (a view's path, before its MCP call) pins
that snapshot for the rest of the request (`pinned`). With `max_staleness_s` (the Lambda
functions: KILN_CATALOG_MAX_STALENESS_S) a version read younger than that serves the requests
that arrive meanwhile, so one container reads `CATALOG|VERSION` at most once per window
whatever its request rate, and the item's 3,000 reads a second carry 3,000 x window warm
containers instead of 3,000 requests a second; a change reaches every container within the
window. Against the local emulator, the read is skipped while the emulator's write counter
(emulator/changes.py) still shows the value it had just before the last read: no write that
could move the version was acknowledged since, so the snapshot is still the catalog.

When the version moved, the snapshot moves forward by the change log (catalog/changelog.py):
one small Query and one GetItem per changed tool, so a save costs each warm container about
3 read units instead of a read of the whole `TOOLS` partition (34 for 100 tools), and 200
warm containers stay well under the partition's 3,000 units a second. The whole catalog is
read only on a container's first request, or when the log cannot say what changed.

A snapshot also carries what each of its tools' bundles resolved to (`packages`, by bundle
id: catalog/packages.py), which their served fingerprints take: read with the whole catalog
(one BatchGetItem per 100 bundles), and when moving forward only for the bundles the log names
(one turned ready, or left ready to be rebuilt) and those of changed tools not known yet.
Every tool of a snapshot shares its map (`Tool.packages`), so `tools/list` reads nothing more.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field, replace

from kiln.catalog.model import Revision, Tool
from kiln.catalog.store import CatalogStore

FILE_CACHE_BYTES = 32 * 1024 * 1024
_PINNED: ContextVar[Snapshot | None] = ContextVar("kiln_pinned_snapshot", default=None)


@dataclass(frozen=True)
class Snapshot:
    version: int
    tools: dict[str, Tool] = field(default_factory=dict)  # live tools by exact name
    # bundle id -> what it resolved to (catalog/packages.py); grows by `cover`, never changes
    packages: dict[str, str | None] = field(default_factory=dict)


def _made(version: int, tools: list[Tool], packages: dict[str, str | None]) -> Snapshot:
    """A snapshot whose tools all carry its packages map."""
    shared = {tool.name: replace(tool, packages=packages) for tool in tools}
    return Snapshot(version, shared, packages)


class CatalogSnapshots:
    """Serves the catalog from memory; reloads it only when the version number moved."""

    def __init__(
        self,
        store: CatalogStore,
        *,
        code_cache_entries: int = 256,
        changes: Callable[[], bytes | None] | None = None,
        max_staleness_s: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._changes = changes
        self._max_staleness_s = max_staleness_s
        self._clock = clock
        self._read_at: float | None = None  # when the last version read began
        # (counter before the read, the snapshot that read produced): set together, so a
        # match always vouches for the snapshot it is paired with.
        self._marked: tuple[bytes, Snapshot] | None = None
        self._lock = threading.Lock()
        self._snapshot: Snapshot | None = None
        self._code: OrderedDict[str, str] = OrderedDict()
        self._code_cache_entries = code_cache_entries
        self._files: OrderedDict[str, bytes] = OrderedDict()
        self._files_bytes = 0
        self._read: asyncio.Task[Snapshot] | None = None
        self._reads_started = 0
        self._read_number = 0
        self.reloads = 0  # whole-catalog reads
        self.forwards = 0  # moves forward by the change log

    @property
    def latest(self) -> Snapshot | None:
        """The snapshot the last read produced, without reading anything."""
        return self._snapshot

    async def fresh(self) -> Snapshot:
        """`current()` for async callers, sharing reads between concurrent requests.

        A request never settles for a read that began before it arrived (that read could
        miss a write the caller has just seen acknowledged); it joins the first read that
        starts after it arrived. Under load one version read then serves every request
        that came in while the previous one was in flight.
        """
        unchanged = _PINNED.get() or self._unchanged() or self._recent()
        if unchanged is not None:
            return unchanged
        arrived = self._reads_started
        while True:
            read = self._read
            if read is None or read.done():
                self._reads_started += 1
                self._read_number = self._reads_started
                read = self._read = asyncio.ensure_future(asyncio.to_thread(self.current))
                return await asyncio.shield(read)
            if self._read_number > arrived:
                return await asyncio.shield(read)
            await asyncio.wait({read})

    def current(self) -> Snapshot:
        """The catalog as of now: one strongly consistent read, plus a reload if it changed."""
        mark = self._changes() if self._changes is not None else None
        began = self._clock()
        version = self._store.catalog_version()
        snapshot = self._snapshot
        if snapshot is None or snapshot.version != version:
            with self._lock:
                snapshot = self._snapshot
                if snapshot is None or snapshot.version != version:
                    snapshot = self._forward(snapshot, version) or self._reload(version)
                    self._snapshot = snapshot
        if mark is not None:
            self._marked = (mark, snapshot)
        self._read_at = began
        return snapshot

    def _reload(self, version: int) -> Snapshot:
        """The whole catalog: one Query of the `TOOLS` partition (34 units for 100 tools)."""
        self.reloads += 1
        tools = self._store.list_tools()
        return _made(version, tools, self._store.packages(_bundles(tools)))

    def _forward(self, snapshot: Snapshot | None, version: int) -> Snapshot | None:
        """`snapshot` moved to `version` by re-reading only the tools the versions between
        changed (catalog/changelog.py); None when the change log cannot say which."""
        changed = None if snapshot is None else self._store.changed_since(snapshot.version, version)
        if snapshot is None or changed is None:
            return None
        by_id = {tool.id: tool for tool in snapshot.tools.values()}
        for tool_id in changed.tools:
            tool = self._store.tool_by_id(tool_id)
            by_id.pop(tool_id, None)
            if tool is not None and not tool.deleted:
                by_id[tool_id] = tool
        packages = dict(snapshot.packages)
        tools = list(by_id.values())
        unknown = {b for b in _bundles(tools) if b not in packages}
        if changed.bundles or unknown:
            packages.update(self._store.packages(changed.bundles | unknown))
        self.forwards += 1
        return _made(version, tools, packages)

    def cover(self, snapshot: Snapshot, bundle_ids: set[str]) -> None:
        """Reads into `snapshot` the bundles it does not know yet (a view's pinned revisions
        may use bundles no head uses). Blocking; the map only grows, shared by its tools."""
        missing = {b for b in bundle_ids if b not in snapshot.packages}
        if missing:
            found = self._store.packages(missing)
            with self._lock:
                snapshot.packages.update(found)

    def packaged(self, tools: list[Tool]) -> list[Tool]:
        """`tools` (read from the store: REST) with what their bundles resolved to as the
        current snapshot has it, so they show the fingerprint MCP serves. Blocking."""
        snapshot = self.current()
        self.cover(snapshot, _bundles(tools))
        return [replace(tool, packages=snapshot.packages) for tool in tools]

    @contextmanager
    def pinned(self, snapshot: Snapshot) -> Iterator[None]:
        """Within the block (one request), `fresh()` answers `snapshot` without reading."""
        token = _PINNED.set(snapshot)
        try:
            yield
        finally:
            _PINNED.reset(token)

    def _recent(self) -> Snapshot | None:
        """The last snapshot, if its version read began less than the window ago."""
        read_at, snapshot = self._read_at, self._snapshot
        if read_at is None or snapshot is None or self._max_staleness_s <= 0:
            return None
        return snapshot if self._clock() - read_at < self._max_staleness_s else None

    def _unchanged(self) -> Snapshot | None:
        """The snapshot of the last read, if the emulator's counter says it is still current."""
        marked = self._marked
        if marked is None or self._changes is None:
            return None
        return marked[1] if self._changes() == marked[0] else None

    def revision(self, name: str, number: int) -> Revision:
        """One revision of a tool, read from the store (a task pinned to it runs it)."""
        return self._store.revision(name, number)

    def cached_code(self, revision: Revision) -> str | None:
        """A revision's source if this process has it already (no I/O: safe on the loop)."""
        key = revision.code_sha256
        with self._lock:
            if key in self._code:
                self._code.move_to_end(key)
                return self._code[key]
        return None

    def code(self, revision: Revision) -> str:
        """A revision's source, fetched from S3 once per process (it never changes)."""
        cached = self.cached_code(revision)
        if cached is not None:
            return cached
        key = revision.code_sha256
        text = self._store.code(revision)
        with self._lock:
            self._code[key] = text
            while len(self._code) > self._code_cache_entries:
                self._code.popitem(last=False)
        return text

    def files(self, revision: Revision) -> dict[str, bytes]:
        """A revision's extra files, each fetched once per process (kept up to FILE_CACHE_BYTES)."""
        return {path: self._file(sha) for path, sha in revision.files.items()}

    def _file(self, sha: str) -> bytes:
        with self._lock:
            if sha in self._files:
                self._files.move_to_end(sha)
                return self._files[sha]
        data = self._store.file(sha)
        with self._lock:
            if sha not in self._files:
                self._files[sha] = data
                self._files_bytes += len(data)
            while self._files_bytes > FILE_CACHE_BYTES and len(self._files) > 1:
                _, dropped = self._files.popitem(last=False)
                self._files_bytes -= len(dropped)
        return data


def _bundles(tools: list[Tool]) -> set[str]:
    return {tool.head.bundle_id for tool in tools if tool.head.bundle_id is not None}
