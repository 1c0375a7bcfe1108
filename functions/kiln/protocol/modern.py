"""The stateless era (2026-07-28): `server/discover`, `resultType`, serverInfo in every `_meta`."""

from __future__ import annotations

import functools
from typing import Any

from kiln.protocol.jsontext import dumps
from kiln.protocol.settings import ProtocolSettings
from kiln.protocol.spec import SERVER_INFO_META_KEY
from kiln.protocol.tasks import TASKS_EXTENSION
from kiln.protocol.wire import MODERN_VERSIONS, server_info


class ModernEra:
    def __init__(self, settings: ProtocolSettings, *, tasks: bool = False) -> None:
        self._server_info = server_info(
            name=settings.server_name,
            version=settings.server_version,
            title=settings.title,
            description=settings.description,
            website_url=settings.website_url,
            protocol_version=MODERN_VERSIONS[-1],
        )
        self._settings = settings
        self._tasks = tasks

    @functools.cached_property
    def _discover(self) -> bytes:
        # Static, rendered through the models on the first discover (not by every cold start).
        from mcp_types import DiscoverResult, ServerCapabilities, ToolsCapability

        settings, tasks = self._settings, self._tasks
        return dumps(
            self.finish(
                DiscoverResult(
                    supported_versions=list(MODERN_VERSIONS),
                    # No listChanged, no subscriptions: subscriptions/listen is declined (-32601).
                    capabilities=ServerCapabilities(
                        tools=ToolsCapability(),
                        # Long-running tools (SEP-2663); no settings are defined for it.
                        extensions={TASKS_EXTENSION: {}} if tasks else None,
                    ),
                    instructions=settings.instructions,
                    ttl_ms=settings.discover_ttl_ms,
                    cache_scope="public",  # the same for every caller
                ).model_dump(by_alias=True, exclude_none=True, mode="json")
            )
        )

    def discover(self) -> bytes:
        """The serialised discover result (static: built once)."""
        return self._discover

    def finish(self, result: dict[str, Any]) -> dict[str, Any]:
        """Every modern result: `resultType` and serverInfo in `_meta`."""
        result.setdefault("resultType", "complete")
        result["_meta"] = {**result.get("_meta", {}), SERVER_INFO_META_KEY: self._server_info}
        return result
