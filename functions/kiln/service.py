"""Kiln's tools as MCP sees them: the catalog snapshot, bundles and the runner, joined."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager, ExitStack
from pathlib import Path
from typing import Any, Protocol

from kiln.bundles.cache import BundleError
from kiln.catalog.model import Tool
from kiln.catalog.snapshot import CatalogSnapshots
from kiln.protocol.backend import CallContext, ToolOutcome, ToolView
from kiln.runner import (
    InvalidArgumentsError,
    NodeUnavailableError,
    Runner,
    RunnerBusyError,
    contract_text,
)
from kiln.runner.model import RunRequest, RunResult

log = logging.getLogger("kiln.service")


class BundlePaths(Protocol):
    def use(self, bundle_id: str) -> AbstractContextManager[Path]:
        """The unpacked bundle's directory, kept (never evicted) while the block runs.

        Raises BundleError (not ready, failed, or not downloadable) with a message to show.
        """
        ...


class SecretValues(Protocol):
    def values_for(self, tool: Tool) -> Mapping[str, str]: ...


def tool_view(tool: Tool) -> ToolView:
    head = tool.head
    return ToolView(
        name=tool.name,
        description=head.description,
        input_schema=head.input_schema,
        title=head.title,
        output_schema=head.output_schema,
        annotations=head.annotations,
        updated_at=tool.updated_at,
    )


class CatalogBackend:
    """The `ToolBackend` of the public endpoint: enabled catalog tools, run by the runner."""

    def __init__(
        self,
        snapshots: CatalogSnapshots,
        runner: Runner,
        *,
        bundles: BundlePaths | None = None,
        secrets: SecretValues | None = None,
    ) -> None:
        self._snapshots = snapshots
        self._runner = runner
        self._bundles = bundles
        self._secrets = secrets
        self._views: tuple[int, list[ToolView]] | None = None

    async def list_tools(self, ctx: CallContext) -> Sequence[ToolView]:
        snapshot = await self._snapshots.fresh()
        cached = self._views
        if cached is not None and cached[0] == snapshot.version:
            return cached[1]
        views = [tool_view(tool) for tool in snapshot.tools.values() if tool.enabled]
        self._views = (snapshot.version, views)
        return views

    async def get_tool(self, name: str, ctx: CallContext) -> ToolView | None:
        tool = (await self._snapshots.fresh()).tools.get(name)
        return tool_view(tool) if tool is not None and tool.enabled else None

    async def call_tool(
        self, tool: ToolView, arguments: Mapping[str, Any], ctx: CallContext
    ) -> ToolOutcome:
        # get_tool has just read the catalog for this request: no second version read.
        latest = self._snapshots.latest or await self._snapshots.fresh()
        found = latest.tools.get(tool.name)
        if found is None or not found.enabled:
            return ToolOutcome(
                f"Tool {tool.name!r} was disabled or removed; list tools again.", True
            )
        outcome, _ = await self.execute(found, arguments, time_left_s=ctx.time_left_s)
        return outcome

    async def execute(
        self, tool: Tool, arguments: Mapping[str, Any], *, time_left_s: float | None
    ) -> tuple[ToolOutcome, RunResult | None]:
        """Run a catalog tool's head revision; the outcome is shaped as the contract says.

        The RunResult is None when the tool could not start (bundle not ready, runner busy).
        """
        head = tool.head
        with ExitStack() as pinned:
            try:
                bundle_path = await self._bundle_path(head.bundle_id, pinned)
            except BundleError as error:
                return ToolOutcome(f"Tool {tool.name!r} cannot run: {error}", True), None
            return await self._run(tool, arguments, bundle_path, time_left_s)

    async def _run(
        self,
        tool: Tool,
        arguments: Mapping[str, Any],
        bundle_path: Path | None,
        time_left_s: float | None,
    ) -> tuple[ToolOutcome, RunResult | None]:
        head = tool.head
        code = await asyncio.to_thread(self._snapshots.code, head)
        files = await asyncio.to_thread(self._snapshots.files, head) if head.files else {}
        try:
            extra_env = (
                dict(await asyncio.to_thread(self._secrets.values_for, tool))
                if self._secrets is not None
                else {}
            )
        except LookupError as error:  # a declared secret is not set
            return ToolOutcome(f"Tool {tool.name!r} cannot run: {error}", True), None
        request = RunRequest(
            language=head.language,
            code=code,
            arguments=arguments,
            timeout_s=head.timeout_seconds,
            time_left_s=time_left_s,
            bundle_path=bundle_path,
            extra_env=extra_env,
            files=files,
            label=f"{tool.name}@{head.number}",
        )
        try:
            result = await self._runner.run(request)
        except (RunnerBusyError, NodeUnavailableError, InvalidArgumentsError) as error:
            return ToolOutcome(str(error), True), None
        return ToolOutcome(contract_text(result), result.failed, stdout=result.stdout), result

    async def _bundle_path(self, bundle_id: str | None, pinned: ExitStack) -> Path | None:
        if bundle_id is None or self._bundles is None:
            return None
        return await asyncio.to_thread(pinned.enter_context, self._bundles.use(bundle_id))
