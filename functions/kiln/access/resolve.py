"""Which tools a view shows, as of one catalog version; cached until the version moves."""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping

from kiln.access.holds import Held
from kiln.access.holds import following as accepted_head
from kiln.access.pins import pinned_tool, problems
from kiln.access.view_store import ViewStore
from kiln.access.views import View
from kiln.catalog.errors import CatalogError
from kiln.catalog.model import Revision, Tool

log = logging.getLogger("kiln.access.views")

RevisionReader = Callable[[str, int], Revision]  # (tool id, number); raises CatalogError


def resolve(
    view: View,
    tools: Mapping[str, Tool],
    revision: Callable[[Tool, int], Revision | None],
    held: list[Held] | None = None,
) -> dict[str, Tool]:
    """The view's enabled tools by name; a pinned one carries its pinned revision as `head`.

    A name entry wins over a tag match of the same tool (so a pin holds). An entry bound to a
    tool (`kiln.access.pins`) serves that tool under its name of today, or nothing: a pinned
    revision that does not exist, or a tool that is gone, is never served by another. An
    entry that follows a tool serves the newest revision its owner accepted (`holds`); what
    is held back is added to `held`.
    """
    chosen = _tagged(view, tools)
    pinned: set[str] = set()
    by_id = {tool.id: tool for tool in tools.values()}
    for entry in view.entries:
        if entry.tool is None:
            continue
        served, _ = pinned_tool(entry, tools, by_id, revision)
        chosen.pop(str(entry.tool), None)  # the name is the entry's, whoever holds it now
        if served is not None:
            chosen[served.name] = served
            if entry.pin is not None:
                pinned.add(served.name)
    for name in [name for name in chosen if name not in pinned]:
        kept, holding = accepted_head(view, chosen[name], revision)
        if holding is not None and held is not None:
            held.append(holding)
        if kept is None:
            del chosen[name]
        else:
            chosen[name] = kept
    return chosen


def _tagged(view: View, tools: Mapping[str, Tool]) -> dict[str, Tool]:
    """The enabled tools the view's tag entries match, by name."""
    chosen: dict[str, Tool] = {}
    for entry in view.entries:
        if entry.tag is None:
            continue
        for tool in tools.values():
            if tool.enabled and entry.tag in tool.head.tags:
                chosen.setdefault(tool.name, tool)
    return chosen


class ViewCatalog:
    """Views and what they resolve to, reloaded only when the catalog version changed.

    View writes bump the catalog version, so the version read each request already makes
    (`CatalogSnapshots.fresh`) tells this cache when to reload: no extra read per request.
    """

    def __init__(
        self, store: ViewStore, revisions: RevisionReader, *, revision_cache: int = 1024
    ) -> None:
        self.store = store
        self._read_revision = revisions
        self._lock = threading.Lock()
        self._version = -1
        self._views: dict[str, View] = {}
        self._resolved: dict[str, dict[str, Tool]] = {}
        self._revisions: OrderedDict[tuple[str, int], Revision] = OrderedDict()
        self._revision_cache = revision_cache

    def views_ready(self, version: int) -> dict[str, View] | None:
        """What `views_at` would answer, if it needs no I/O; else None."""
        with self._lock:
            return self._views if version == self._version else None

    def views_at(self, version: int) -> dict[str, View]:
        """Every view as of catalog `version` (blocking: one query when the version moved)."""
        with self._lock:
            if version == self._version:
                return self._views
        views = {view.name: view for view in self.store.list()}
        with self._lock:
            if version >= self._version:
                self._version, self._views, self._resolved = version, views, {}
            return self._views

    def tools_of(
        self, version: int, name: str, tools: Mapping[str, Tool]
    ) -> dict[str, Tool] | None:
        """The tools view `name` shows at `version` (None: no such view). Blocking."""
        view = self.views_at(version).get(name)
        return None if view is None else self.tools_for(version, view, tools)

    def tools_for(self, version: int, view: View, tools: Mapping[str, Tool]) -> dict[str, Tool]:
        """The tools `view` (as read at `version`) shows. Blocking: revisions a pin needs."""
        with self._lock:
            cached = self._resolved.get(view.name) if version == self._version else None
        if cached is not None:
            return cached
        result = resolve(view, tools, self._revision)
        with self._lock:
            if version == self._version:
                self._resolved[view.name] = result
        return result

    def fingerprint_pinned_bundles(self, view: View, tools: Mapping[str, Tool]) -> set[str]:
        """The bundles of the revisions `view` pins by fingerprint: what they resolved to must
        be known before those pins are checked (CatalogSnapshots.cover). Blocking."""
        by_id = {tool.id: tool for tool in tools.values()}
        found: set[str] = set()
        for entry in view.entries:
            tool = by_id.get(entry.tool_id or "")
            if entry.fingerprint is None or entry.pin is None or tool is None:
                continue
            revision = (
                tool.head if entry.pin == tool.head.number else self._revision(tool, entry.pin)
            )
            if revision is not None and revision.bundle_id:
                found.add(revision.bundle_id)
        return found

    def problems_of(self, version: int, name: str, tools: Mapping[str, Tool]) -> list[str]:
        """Why entries of view `name` serve nothing at `version` (blocking)."""
        view = self.views_at(version).get(name)
        return [] if view is None else problems(view, tools, self._revision)

    def held_of(self, version: int, name: str, tools: Mapping[str, Tool]) -> list[Held]:
        """The breaking revisions view `name` holds back at `version` (blocking)."""
        view = self.views_at(version).get(name)
        held: list[Held] = []
        if view is not None:
            resolve(view, tools, self._revision, held)
        return held

    def cached(self, version: int, name: str) -> dict[str, Tool] | None:
        """What `tools_of` would answer, if it needs no I/O; else None."""
        with self._lock:
            return self._resolved.get(name) if version == self._version else None

    def _revision(self, tool: Tool, number: int) -> Revision | None:
        key = (tool.id, number)
        with self._lock:
            if key in self._revisions:
                self._revisions.move_to_end(key)
                return self._revisions[key]
        try:
            found = self._read_revision(tool.id, number)
        except CatalogError:  # not yet made, perhaps: look again at the next catalog change
            log.warning("a view pins %s@%d, which does not exist", tool.name, number)
            return None
        with self._lock:
            self._revisions[key] = found  # revisions are immutable: cache for good
            while len(self._revisions) > self._revision_cache:
                self._revisions.popitem(last=False)
        return found
