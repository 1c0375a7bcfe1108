"""Breaking revisions held back from the views that follow a tool's latest revision.

A view entry that follows a tool (a name without `@N`, or a tag) serves the newest revision
its owner has accepted. A revision saved as breaking (`kiln.catalog.breaking`: it said
`--breaking`) after the view was made is held back: the view serves the revision just before
it, and lists it under `pending`, until its owner accepts it (`kiln views accept VIEW TOOL`,
`POST /api/views/{name}/accept`), which accepts every revision of that tool up to its head of
that moment. Revisions that existed when the view was made were seen by its owner: accepted.
Pinned entries never move, so nothing is held from them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from kiln.access.views import View
from kiln.catalog.model import Revision, Tool

# Revisions walked back from the head, at most (each is read once per container, then cached).
MAX_WALK = 256


@dataclass(frozen=True)
class Held:
    """A breaking revision a view holds back, and the revision it serves meanwhile."""

    tool: str
    held: int
    serving: int | None  # None: the revision before could not be read; nothing is served
    findings: tuple[Any, ...]

    def as_json(self, view: str) -> dict[str, Any]:
        return {
            "tool": self.tool,
            "held": self.held,
            "serving": self.serving,
            "findings": [dict(finding) for finding in self.findings],
            "accept": f"kiln views accept {view} {self.tool}",
        }


def following(
    view: View, tool: Tool, revision: Callable[[Tool, int], Revision | None]
) -> tuple[Tool | None, Held | None]:
    """`tool` as `view` serves it when the view follows its latest revision (its head maybe
    an earlier revision), and what is held back (None: nothing)."""
    floor = view.accepted.get(tool.id, 0)
    first: Revision | None = None  # the oldest breaking revision not yet accepted
    at: Revision | None = tool.head
    for _ in range(MAX_WALK):
        if at is None or at.number <= floor or (view.since and at.created_at <= view.since):
            break
        if at.breaking:
            first = at
        at = revision(tool, at.number - 1) if at.number > 1 else None
    if first is None:
        return tool, None
    before = revision(tool, first.number - 1) if first.number > 1 else None
    held = Held(tool.name, first.number, before.number if before else None, first.breaking)
    return (replace(tool, head=before) if before else None), held
