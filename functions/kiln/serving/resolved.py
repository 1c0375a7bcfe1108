"""A tool as one request resolved it: what MCP sees of it, with the catalog tool (at the
revision the request's view serves), that view and the call's account riding along, so that the
rest of the call (the run, the ledger, a task) never looks the tool up again by name."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kiln.access.views import View
from kiln.accounting.account import CallAccount
from kiln.catalog import fingerprint
from kiln.catalog.model import Tool
from kiln.protocol.backend import ToolView
from kiln.protocol.errors import InvalidParamsError
from kiln.protocol.pinning import PENDING, fingerprint_meta


@dataclass(frozen=True)
class ResolvedTool(ToolView):
    """A tool as `get_tool` resolved it for one request: the catalog tool (at the revision the
    request's view pins) and that view ride along with what MCP sees, so the rest of the call
    (the run, the ledger, a task) uses them and never looks the tool up again by name."""

    tool: Tool = field(kw_only=True, compare=False, repr=False)
    view: View | None = field(kw_only=True, default=None, compare=False, repr=False)
    # The call's account (kiln.accounting.account), where the gate admitted it; None: no gate.
    account: CallAccount | None = field(kw_only=True, default=None, compare=False, repr=False)


def tool_view(tool: Tool) -> ToolView:
    return ToolView(**_view_fields(tool))


def resolved_tool(
    tool: Tool, view: View | None, account: CallAccount | None = None
) -> ResolvedTool:
    return ResolvedTool(**_view_fields(tool), tool=tool, view=view, account=account)


def _view_fields(tool: Tool) -> dict[str, Any]:
    head = tool.head
    return {
        "name": tool.name,
        "description": head.description,
        "input_schema": head.input_schema,
        "title": head.title,
        "output_schema": head.output_schema,
        "annotations": head.annotations,
        "updated_at": tool.updated_at,
        # ask_first: without the tasks extension it simply runs inside the request
        "task_support": "optional" if head.task == "ask_first" else head.task,
        "asks_first": head.task == "ask_first",
        "revision": f"{tool.id}@{head.number}",
        "tags": head.tags,
        "calls": head.calls,
        "meta": fingerprint_meta(fingerprint.served_tool(tool) or PENDING),
    }


def disabled_for(name: str, principal: Any) -> None:
    """A disabled tool's author is told why (InvalidParamsError); any other caller sees it
    unknown."""
    can = getattr(principal, "can", None)
    if can is not None and can("author"):
        raise InvalidParamsError(
            f"Tool {name!r} is disabled: enable it (POST /api/tools/{name}/enable, or the "
            "studio) to call it; callers without an author key see it as unknown"
        )


def resolved(tool: ToolView) -> ResolvedTool:
    """The ResolvedTool `get_tool` gave for this request (TypeError for any other ToolView)."""
    if not isinstance(tool, ResolvedTool):
        raise TypeError(
            f"tool {tool.name!r}: the catalog backend runs the ResolvedTool its get_tool gave "
            "for this request, not a ToolView made elsewhere"
        )
    return tool
