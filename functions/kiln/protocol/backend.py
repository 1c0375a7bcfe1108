"""What the protocol layer needs from the rest of Kiln. Implemented outside `protocol/`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class ToolView:
    """A callable tool as MCP sees it (the head revision of an enabled catalog tool)."""

    name: str
    description: str
    input_schema: Mapping[str, Any]
    title: str | None = None
    output_schema: Mapping[str, Any] | None = None
    annotations: Mapping[str, Any] | None = None  # readOnlyHint, destructiveHint, ...
    updated_at: str = ""  # ISO 8601 UTC; tools/list orders by this, newest first, then name
    meta: Mapping[str, Any] | None = None  # extra `_meta` for versions that know it


@dataclass(frozen=True)
class ToolOutcome:
    """What running a tool produced, already in the script contract's text form."""

    text: str  # the contract text: stdout or "(no output)", then [stderr] / [exit N] / [timeout]
    is_error: bool
    stdout: str = ""  # the raw stdout, for structuredContent and the `kiln/content` shape
    # (protocol/content.py); `text` should start with it, so notes after it are kept


@dataclass(frozen=True)
class CallContext:
    """Per-request facts the transport knows and the protocol passes through."""

    time_left_s: float | None = None  # from the Lambda context, or a configured local budget
    principal: Any = None  # who is calling (auth); None when anonymous
    extra: Mapping[str, Any] = field(default_factory=dict)


class ToolBackend(Protocol):
    async def list_tools(self, ctx: CallContext) -> Sequence[ToolView]:
        """Every tool the caller may see, in any order (the protocol sorts and pages)."""
        ...

    async def get_tool(self, name: str, ctx: CallContext) -> ToolView | None:
        """The named tool if it exists, is enabled and the caller may see it."""
        ...

    async def call_tool(
        self, tool: ToolView, arguments: Mapping[str, Any], ctx: CallContext
    ) -> ToolOutcome:
        """Run a tool whose arguments already passed its input schema."""
        ...
