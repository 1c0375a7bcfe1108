"""The errors of bundles: a build that produced none (every installer raises it), a bundle
a call needs that cannot be used, and the store's refusals, which `kiln.bundles.store` raises
(each carries its answer: `kiln.errors.KilnError`)."""

from __future__ import annotations

from kiln.errors import KilnError, NotFound


class BuildError(Exception):
    """A build that did not produce a bundle; `log` is everything the tools printed."""

    def __init__(self, reason: str, log: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.log = log


class BundleError(Exception):
    """A bundle a call needs cannot be used; the message says what to do about it."""


class BundleNotReadyError(BundleError):
    """The bundle is pending, building or failed (or unknown). The message is for any caller;
    `for_author` adds what only the tool's author should read (the build's error, the bundle
    id, the commands that fix it)."""

    def __init__(
        self, message: str, *, bundle_id: str, status: str | None, for_author: str | None = None
    ) -> None:
        super().__init__(message)
        self.bundle_id = bundle_id
        self.status = status
        self.for_author = for_author or message


class BundleFetchError(BundleError):
    """The bundle is ready but its files could not be downloaded or unpacked."""


class BundleIdError(NotFound, LookupError):
    """A bundle id (or prefix) that names no bundle."""


class AmbiguousBundleIdError(BundleIdError, status=409, rest_code="ambiguous_id"):
    """A prefix that more than one bundle id starts with."""


class BundleStateError(KilnError, status=409, rest_code="bundle_state"):
    """A status change that the bundle's current status does not allow."""
