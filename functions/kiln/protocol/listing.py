"""tools/list: deterministic order, signed cursors, fields per version, cached serialised pages.

The backend hands over the tools the caller may see. Each distinct list (recognised by the
identity of its `ToolView` objects, so a backend that keeps its catalog in memory costs one
pointer comparison per tool) is sorted and fingerprinted once; each page is rendered and
serialised once per (version, offset, cache scope), then served as bytes. Tools are rendered
as the `mcp-types` `Tool` model dumps them (`wire.tool_dict`), so that a cold start's first
list never imports pydantic's models; the model itself renders what only it can judge.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections import OrderedDict
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from kiln.protocol.backend import ToolView
from kiln.protocol.cursor import CursorCodec, CursorError
from kiln.protocol.errors import InvalidParamsError, RequestId
from kiln.protocol.jsontext import dumps
from kiln.protocol.wire import MODERN_VERSIONS, tool_dict, tool_for_version, tool_model

log = logging.getLogger(__name__)

_SNAPSHOTS = 8  # distinct lists kept (callers with different views, old and new catalogs)

Finish = Callable[[dict[str, Any]], dict[str, Any]]
T = TypeVar("T")
Build = Callable[[list[dict[str, Any]], Mapping[str, tuple[str, ...]]], T]


def order(tools: Sequence[ToolView]) -> list[ToolView]:
    """Recently updated first; ties by name."""
    by_name = sorted(tools, key=lambda t: t.name)
    return sorted(by_name, key=lambda t: t.updated_at, reverse=True)


@dataclass
class _Snapshot:
    source: tuple[ToolView, ...]  # keeps the objects alive, so their ids stay meaningful
    dumped: list[dict[str, Any]]  # superset Tool dicts, in list order
    fingerprint: str
    pages: dict[tuple[str, int, str], bytes] = field(default_factory=dict)
    index: Any = None  # search mode's index of these tools, built on its first search


def _dump_tool(tool: ToolView) -> dict[str, Any]:
    plain = tool_dict(tool)
    if plain is not None:
        return plain
    from mcp_types import Tool
    from pydantic import ValidationError

    try:
        model = tool_model(tool)
    except ValidationError:
        # Annotations the catalog should have refused; list the tool without them.
        log.warning("tool %s has invalid annotations; listing it without them", tool.name)
        model = Tool(
            name=tool.name, description=tool.description, input_schema=dict(tool.input_schema)
        )
    return model.model_dump(by_alias=True, exclude_none=True, mode="json")


class ToolLister:
    def __init__(
        self, codec: CursorCodec, *, page_size: int, ttl_ms: int, tasks: bool = False
    ) -> None:
        self._tasks = tasks  # False: no task support is listed (the endpoint has no tasks)
        self._codec = codec
        self._page_size = max(1, page_size)
        self._ttl_ms = ttl_ms
        self._snapshots: OrderedDict[tuple[int, ...], _Snapshot] = OrderedDict()
        # The list last served, and its snapshot: a backend that hands out the same list
        # object while its catalog is unchanged (CatalogBackend) costs one comparison.
        self._last: tuple[Sequence[ToolView], _Snapshot] | None = None

    def _snapshot(self, tools: Sequence[ToolView]) -> _Snapshot:
        last = self._last
        if last is not None and last[0] is tools and isinstance(tools, tuple):
            return last[1]
        snap = self._lookup(tools)
        self._last = (tools, snap)
        return snap

    def _lookup(self, tools: Sequence[ToolView]) -> _Snapshot:
        key = tuple(id(t) for t in tools)
        snap = self._snapshots.get(key)
        if snap is not None and all(a is b for a, b in zip(snap.source, tools, strict=True)):
            self._snapshots.move_to_end(key)
            return snap
        dumped = [_dump_tool(t) for t in order(tools)]
        fingerprint = hashlib.sha256(dumps(dumped)).hexdigest()[:32]
        snap = _Snapshot(tuple(tools), dumped, fingerprint)
        self._snapshots[key] = snap
        if len(self._snapshots) > _SNAPSHOTS:
            self._snapshots.popitem(last=False)
        return snap

    def page(
        self,
        tools: Sequence[ToolView],
        params: dict[str, Any],
        *,
        version: str,
        private: bool,
        finish: Finish,
        request_id: RequestId,
    ) -> bytes:
        """The serialised tools/list result for the page `params.cursor` points at."""
        snap = self._snapshot(tools)
        offset = self._offset(params, snap.fingerprint, request_id)
        scope = "private" if private else "public"
        key = (version, offset, scope)
        cached = snap.pages.get(key)
        if cached is None:
            cached = dumps(self._render(snap, offset, version, scope, finish))
            snap.pages[key] = cached
        return cached

    async def index(self, tools: Sequence[ToolView], build: Build[T]) -> T:
        """`build(entries, tags)`, in a thread, once per distinct list (per catalog version
        and view), then kept beside its pages: search mode's index. `entries` are the tools
        as listed (superset dicts), `tags` each one's tags by name."""
        snap = self._snapshot(tools)
        if snap.index is None:
            tags = {t.name: t.tags for t in snap.source}
            snap.index = await asyncio.to_thread(build, snap.dumped, tags)
        index: T = snap.index
        return index

    def described(
        self, tools: Sequence[ToolView], names: Collection[str], version: str
    ) -> dict[str, dict[str, Any]]:
        """Those of `names` that `tools` holds, each exactly as its tools/list entry reads."""
        snap = self._snapshot(tools)
        return {d["name"]: self._entry(d, version) for d in snap.dumped if d["name"] in names}

    def _entry(self, dumped: dict[str, Any], version: str) -> dict[str, Any]:
        tool = tool_for_version(dumped, version)
        if not self._tasks:
            tool.pop("execution", None)
        return tool

    def _offset(self, params: dict[str, Any], fingerprint: str, request_id: RequestId) -> int:
        if "cursor" not in params or params["cursor"] is None:
            return 0
        cursor = params["cursor"]
        if not isinstance(cursor, str):
            raise InvalidParamsError(
                "Invalid params: cursor must be a string", request_id=request_id
            )
        try:
            return self._codec.decode(cursor, fingerprint)
        except CursorError as exc:
            raise InvalidParamsError(f"Invalid cursor: {exc}", request_id=request_id) from exc

    def _render(
        self, snap: _Snapshot, offset: int, version: str, scope: str, finish: Finish
    ) -> dict[str, Any]:
        end = offset + self._page_size
        tools = [self._entry(d, version) for d in snap.dumped[offset:end]]
        # As `ListToolsResult` dumps it (its field order; resultType defaults to "complete").
        result: dict[str, Any] = {"ttlMs": self._ttl_ms, "cacheScope": scope}
        if end < len(snap.dumped):
            result["nextCursor"] = self._codec.encode(end, snap.fingerprint)
        result["tools"] = tools
        result["resultType"] = "complete"
        if version not in MODERN_VERSIONS:
            for key in ("ttlMs", "cacheScope"):
                result.pop(key, None)
        return finish(result)
