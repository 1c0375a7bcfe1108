"""A view's named entries bound to the tool itself: its id, and a pinned revision's content.

A view listing `vt@1` once meant "whatever tool is called vt, revision 1": rename vt away,
create another `vt`, and the view served the impostor. So when a view is saved, each named
entry is bound to the id of the tool that holds the name then (and a pin to the content
digest of that revision). From then on the entry follows the tool, not the name: a rename
carries it along (`carry_rename` rewrites the name the view shows), and a tool that is gone
is refused -- nothing is served in its place, and `problems` says so (REST, `kiln views ls`).
An entry naming no tool yet stays unbound and is bound when a later save finds the tool.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import asdict, replace
from typing import Any

from kiln.access.views import View, ViewEntry, ViewRuleError
from kiln.catalog import fingerprint
from kiln.catalog.errors import CatalogError
from kiln.catalog.model import Revision, Tool

# What a revision is, apart from where and when it was made: two revisions with one digest
# run the same code with the same files, packages, schemas and limits.
_NOT_CONTENT = ("tool_id", "number", "created_at", "created_by", "restored_from", "breaking",
                "fingerprint", "saved_as")  # fmt: skip


def content_digest(revision: Revision) -> str:
    fields = {k: v for k, v in asdict(revision).items() if k not in _NOT_CONTENT}
    text = json.dumps(fields, sort_keys=True, separators=(",", ":"), default=list)
    return hashlib.sha256(text.encode()).hexdigest()


class CatalogBinder:
    """Binds a view's named entries to the tools that hold those names now."""

    def __init__(self, catalog: Any) -> None:
        self._catalog = catalog  # kiln.catalog.store.CatalogStore

    def __call__(self, entry: ViewEntry) -> ViewEntry:
        try:
            tool = self._catalog.get(str(entry.tool))
        except CatalogError:
            if entry.fingerprint is not None:  # a fingerprint can only name what was saved
                raise ViewRuleError(
                    [(str(entry), f"no tool is named {entry.tool!r}, so none has that fingerprint")]
                ) from None
            return entry  # no such tool yet: bound when a later save finds it
        if entry.fingerprint is not None:
            entry = replace(entry, pin=self._revision_with(tool, entry.fingerprint).number)
        digest = None
        # Pinned ahead of the catalog (no such revision yet): the id holds, the content waits.
        with contextlib.suppress(CatalogError):
            if entry.pin is not None:
                digest = content_digest(self._catalog.revision(f"id:{tool.id}", entry.pin))
        return replace(entry, tool_id=tool.id, digest=digest)

    def _revision_with(self, tool: Tool, wanted: str) -> Revision:
        """The newest revision of `tool` whose fingerprint (under its name now) is `wanted`:
        as served (over what its bundle resolved to) or as saved (over its bundle id)."""
        revisions: list[Revision] = self._catalog.revisions(f"id:{tool.id}")
        packages = self._catalog.packages({r.bundle_id for r in revisions if r.bundle_id})
        for revision in reversed(revisions):
            served = fingerprint.served_tool(replace(tool, head=revision, packages=packages))
            if wanted in (served, fingerprint.served(tool.name, revision)):
                return revision
        raise ViewRuleError(
            [
                (
                    f"{tool.name}@{wanted}",
                    f"no revision of {tool.name!r} has that fingerprint (under that name); "
                    f"its head, revision {tool.head.number}, has "
                    f"{fingerprint.served(tool.name, tool.head)}: `kiln tools history "
                    f"{tool.name}` lists each revision's",
                )
            ]
        )


def pinned_tool(
    entry: ViewEntry,
    tools: Mapping[str, Tool],
    by_id: Mapping[str, Tool],
    revision: Callable[[Tool, int], Revision | None],
) -> tuple[Tool | None, str]:
    """The tool (its head the pinned revision) an entry serves, or None and why not."""
    if entry.tool_id is not None:
        tool = by_id.get(entry.tool_id)
        if tool is None:
            return None, "the tool it names is gone (deleted); nothing is served in its place"
    else:
        tool = tools.get(str(entry.tool))
        if tool is None:
            return None, f"no tool is named {entry.tool!r}"
    if not tool.enabled:
        return None, f"{tool.name!r} is disabled"
    if entry.pin is None and entry.fingerprint is None:
        return tool, ""
    number = entry.pin if entry.pin is not None else tool.head.number
    pinned = tool.head if number == tool.head.number else revision(tool, number)
    if pinned is None:
        return None, f"{tool.name!r} has no revision {number}"
    if entry.digest is not None and content_digest(pinned) != entry.digest:
        return None, f"revision {number} of {tool.name!r} is not the content that was pinned"
    served = replace(tool, head=pinned)
    # A pin to the form served names the exact versions its bundle resolved to (a rebuild to
    # others serves nothing); the saved form, its requirements (catalog/README.md).
    forms = (fingerprint.served(tool.name, pinned), fingerprint.served_tool(served))
    if entry.fingerprint is not None and entry.fingerprint not in forms:
        return None, (
            f"{tool.name!r} (revision {number}) is no longer {entry.fingerprint}: it was renamed "
            "or is not that definition; nothing is served in its place"
        )
    return served, ""


def problems(
    view: View, tools: Mapping[str, Tool], revision: Callable[[Tool, int], Revision | None]
) -> list[str]:
    """Why each named entry of the view serves nothing, as `entry: reason` lines."""
    by_id = {tool.id: tool for tool in tools.values()}
    found = []
    for entry in view.entries:
        if entry.tool is not None:
            tool, why = pinned_tool(entry, tools, by_id, revision)
            if tool is None:
                found.append(f"{entry}: {why}")
    return found
