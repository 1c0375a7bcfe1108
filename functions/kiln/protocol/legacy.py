"""The legacy era (2024-11-05 … 2025-11-25): the `initialize` handshake, `ping`, plain results."""

from __future__ import annotations

import functools
from typing import Any

from kiln.protocol.errors import InvalidParamsError, RequestId
from kiln.protocol.jsontext import dumps
from kiln.protocol.settings import ProtocolSettings
from kiln.protocol.wire import LATEST_LEGACY, LEGACY_VERSIONS, server_info


def negotiate(requested: str) -> str:
    """Echo a supported version; answer the latest legacy one otherwise (never an error)."""
    return requested if requested in LEGACY_VERSIONS else LATEST_LEGACY


class LegacyEra:
    def __init__(self, settings: ProtocolSettings, *, tasks: bool = False) -> None:
        self._settings = settings
        self._tasks = tasks

    @functools.cached_property
    def _initialize(self) -> dict[str, bytes]:
        # Static per version: rendered through the models and serialised once, on the first
        # initialize (a stateless client may list first: that must not wait for the models).
        return {
            v: dumps(self._initialize_result(self._settings, v, tasks=self._tasks))
            for v in LEGACY_VERSIONS
        }

    @staticmethod
    def _initialize_result(
        settings: ProtocolSettings, version: str, *, tasks: bool
    ) -> dict[str, Any]:
        from mcp_types import (
            Implementation,
            InitializeResult,
            LoggingCapability,
            ServerCapabilities,
            ServerTasksCapability,
            ToolsCapability,
        )

        task_capability = None
        if tasks and version == "2025-11-25":  # the only legacy revision with tasks
            task_capability = ServerTasksCapability.model_validate(
                {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}
            )
        result = InitializeResult(
            protocol_version=version,
            # Tools only; no listChanged: a stateless JSON server has no stream to announce on.
            # logging: a tool's log lines go out on its call's event stream (talking.py).
            capabilities=ServerCapabilities(
                tools=ToolsCapability(), tasks=task_capability, logging=LoggingCapability()
            ),
            server_info=Implementation(name=settings.server_name, version=settings.server_version),
            instructions=settings.instructions,
        ).model_dump(by_alias=True, exclude_none=True, mode="json")
        result["serverInfo"] = server_info(
            name=settings.server_name,
            version=settings.server_version,
            title=settings.title,
            description=settings.description,
            website_url=settings.website_url,
            protocol_version=version,
        )
        return result

    def initialize(self, params: dict[str, Any], request_id: RequestId) -> bytes:
        requested = params.get("protocolVersion")
        if not isinstance(requested, str):
            raise InvalidParamsError(
                "Invalid params: initialize needs params.protocolVersion as a string",
                request_id=request_id,
            )
        return self._initialize[negotiate(requested)]

    @staticmethod
    def finish(result: dict[str, Any]) -> dict[str, Any]:
        """Legacy results carry none of the 2026-only fields."""
        result.pop("resultType", None)
        return result
