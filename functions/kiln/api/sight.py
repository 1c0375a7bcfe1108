"""What a view-bound caller sees over REST: exactly what it sees over MCP.

A key bound to a view (`kiln keys bind --view`), or a token that a view's `oauth_scopes` or
`oauth_clients` bind, sees on MCP that view's tools only, each at the revision the view serves
(a pin's, or the head), and any other tool answers as one that does not exist. Every REST read
answers the same, whatever the key's scope: the tool list, a tool with its source, its
revisions (the one served), its secrets, its author runs, the ledger and its totals (the
view's tools' calls), the bundles (those its tools' served revisions use) and the views (its
own). A caller no view binds sees the whole catalog, as before.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from fastapi import Request

from kiln.api.mcp_serving import kiln_of
from kiln.catalog.errors import RevisionNotFoundError
from kiln.catalog.model import Tool
from kiln.catalog.store import tool_not_found


@dataclass(frozen=True)
class Sight:
    """The tools a caller sees by id, as its view serves them (None: the whole catalog), and
    the view that binds it (None: no view, or one that is gone)."""

    tools: Mapping[str, Tool] | None = None
    view: str | None = None

    @property
    def bound(self) -> bool:
        return self.tools is not None

    def names(self) -> set[str]:
        return {tool.name for tool in (self.tools or {}).values()}

    def shows(self, tool: Tool) -> bool:
        return self.tools is None or tool.id in self.tools

    def served(self, tool: Tool, ref: str) -> Tool:
        """`tool` as this caller sees it (a pinned revision for a pin), or the refusal an
        unknown tool gets."""
        if self.tools is None:
            return tool
        seen = self.tools.get(tool.id)
        if seen is None:
            raise tool_not_found(ref)
        return seen

    def revision(self, tool: Tool, ref: str, number: int) -> None:
        """Refused as a missing revision unless it is the one this caller is served."""
        if self.served(tool, ref).head.number != number:
            raise RevisionNotFoundError(f"tool {tool.name!r} has no revision {number}")

    def listed(self, tools: Iterable[Tool]) -> list[Tool]:
        """Of `tools`, those this caller sees, as it sees them."""
        if self.tools is None:
            return list(tools)
        return [self.tools[t.id] for t in tools if t.id in self.tools]

    def totals(self, day: Mapping[str, Any]) -> dict[str, Any]:
        """A day's ledger totals narrowed to the seen tools: callers' totals, which mix every
        tool's calls, are left out, and `all` is the sum of the seen tools'."""
        if self.tools is None:
            return dict(day)
        names = self.names()
        by_tool = {name: row for name, row in day["by_tool"].items() if name in names}
        hours = {
            hour: {name: row for name, row in tools.items() if name in names}
            for hour, tools in day.get("by_hour_tool", {}).items()
        }
        everything: dict[str, Any] = {key: 0 for key in day["all"]}
        for row in by_tool.values():
            for key, value in row.items():
                everything[key] = everything.get(key, 0) + value
        hours = {hour: tools for hour, tools in hours.items() if tools}
        return {**day, "all": everything, "by_caller": {}, "by_tool": by_tool,
                "by_hour_tool": hours}  # fmt: skip


async def sight(request: Request, who: Any) -> Sight:
    """What `who` may see of the catalog on this request (one catalog version read)."""
    if who is None or not (getattr(who, "view", None) or getattr(who, "grants", None)):
        return Sight()
    bound = await kiln_of(request).backend.bound_sight(who)
    if bound is None:
        return Sight()
    view, tools = bound
    return Sight({tool.id: tool for tool in tools.values()}, view)
