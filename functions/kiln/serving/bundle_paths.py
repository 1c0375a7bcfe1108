"""What a run needs of the bundle cache: a bundle's folder, kept while the run uses it."""

from __future__ import annotations

import time
from contextlib import AbstractContextManager, ExitStack
from pathlib import Path
from typing import Protocol

from kiln.bundles.cache import BundleError, BundleNotReadyError


class BundlePaths(Protocol):
    def use(self, bundle_id: str) -> AbstractContextManager[Path]:
        """The unpacked bundle's directory, kept (never evicted) while the block runs.

        Raises BundleError (not ready, failed, or not downloadable) with a message to show.
        """
        ...


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
            if error.status not in ("pending", "building"):
                return None
            if time.monotonic() >= give_up:
                raise
        except BundleError:
            return None
        time.sleep(0.2)
