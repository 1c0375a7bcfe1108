"""A process's in-memory copy of the catalog, kept fresh by one version read per request."""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field

from kiln.catalog.model import Revision, Tool
from kiln.catalog.store import CatalogStore


@dataclass(frozen=True)
class Snapshot:
    version: int
    tools: dict[str, Tool] = field(default_factory=dict)  # live tools by exact name


class CatalogSnapshots:
    """Serves the catalog from memory; reloads it only when the version number moved."""

    def __init__(self, store: CatalogStore, *, code_cache_entries: int = 256) -> None:
        self._store = store
        self._lock = threading.Lock()
        self._snapshot: Snapshot | None = None
        self._code: OrderedDict[str, str] = OrderedDict()
        self._code_cache_entries = code_cache_entries
        self.reloads = 0

    def current(self) -> Snapshot:
        """The catalog as of now: one strongly consistent read, plus a reload if it changed."""
        version = self._store.catalog_version()
        snapshot = self._snapshot
        if snapshot is not None and snapshot.version == version:
            return snapshot
        with self._lock:
            snapshot = self._snapshot
            if snapshot is None or snapshot.version != version:
                tools = {tool.name: tool for tool in self._store.list_tools()}
                snapshot = Snapshot(version, tools)
                self._snapshot = snapshot
                self.reloads += 1
        return snapshot

    def code(self, revision: Revision) -> str:
        """A revision's source, fetched from S3 once per process (it never changes)."""
        key = revision.code_sha256
        with self._lock:
            if key in self._code:
                self._code.move_to_end(key)
                return self._code[key]
        text = self._store.code(revision)
        with self._lock:
            self._code[key] = text
            while len(self._code) > self._code_cache_entries:
                self._code.popitem(last=False)
        return text
