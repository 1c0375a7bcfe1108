"""A call's packages (its tool's bundle): where they are, waiting for them, and what a call
answers when they cannot be used."""

from __future__ import annotations

import time
from contextlib import AbstractContextManager, ExitStack
from pathlib import Path
from typing import Protocol

from kiln.bundles.cache import BUILDING, BundleError, BundleNotReadyError
from kiln.catalog.model import Tool
from kiln.protocol.backend import ToolOutcome


class BundlePaths(Protocol):
    def use(self, bundle_id: str, resolved: str | None = None) -> AbstractContextManager[Path]:
        """The unpacked bundle's directory, kept (never evicted) while the block runs; with
        `resolved`, only the build that resolved to that digest (kiln.bundles.cache).

        Raises BundleError (not ready, failed, or not downloadable) with a message to show.
        """
        ...


def cannot_run(tool: Tool, error: BundleError, *, author: bool = False) -> ToolOutcome:
    """The answer of a call whose tool's packages cannot be used: still being built is
    `not_ready` (the caller tries again), anything else is the tool's error. Only its author
    reads why a build failed (`BundleNotReadyError.for_author`); a caller reads one line."""
    said, building = str(error), False
    if isinstance(error, BundleNotReadyError):
        said = error.for_author if author else said
        building = error.status in BUILDING
    return ToolOutcome(f"Tool {tool.name!r} cannot run: {said}", True, not_ready=building)


def wait_for_bundle(
    bundles: BundlePaths, bundle_id: str, pinned: ExitStack, patience_s: float
) -> Path | None:
    """The bundle's folder; None when it failed or is gone; BundleNotReadyError when it is
    still being built after `patience_s`."""
    give_up = time.monotonic() + patience_s
    while True:
        try:
            return pinned.enter_context(bundles.use(bundle_id))
        except BundleNotReadyError as error:
            if error.status not in BUILDING:
                return None
            if time.monotonic() >= give_up:
                raise
        except BundleError:
            return None
        time.sleep(0.2)
