"""What a call's run is made of: its request (code, files, bundle, environment, time left)
and whose run it is, for its fair share of run slots (kiln.runner.slots)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kiln.access.views import View
from kiln.catalog.model import Tool
from kiln.runner.model import RunRequest


def run_shares(tool: Tool, principal: Any, view: View | None) -> tuple[str, ...]:
    """Whose run a call is, for its fair share of run slots: the tool, a keyed caller, a view."""
    shares = [f"tool:{tool.id}"]
    if principal is not None:
        shares.append(f"caller:{principal.label}")
    if view is not None:
        shares.append(f"view:{view.name}")
    return tuple(shares)


def run_request(
    tool: Tool,
    code: str,
    files: Mapping[str, bytes],
    bundle_path: Path | None,
    arguments: Mapping[str, Any],
    *,
    time_left_s: float | None = None,
    env: Mapping[str, str] | None = None,
    **whose: Any,
) -> RunRequest:
    """The run of a call of `tool`'s head (a standby for it is made from the same request);
    `whose` names whose run it is (kiln.runner.slots)."""
    head = tool.head
    return RunRequest(
        language=head.language,
        code=code,
        arguments=arguments,
        timeout_s=head.timeout_seconds,
        time_left_s=time_left_s,
        bundle_path=bundle_path,
        extra_env=env or {},
        files=files,
        label=f"{tool.name}@{head.number}",
        **whose,
    )
