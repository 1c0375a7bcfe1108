"""The catalog's refusals, raised by `kiln.catalog.store`; `kiln.api.errors` maps each to HTTP."""

from __future__ import annotations


class CatalogError(Exception):
    """Base of the catalog's refusals; `kiln.api.errors` maps each to its statuses and codes."""


class ToolNotFoundError(CatalogError):
    pass


class RevisionNotFoundError(CatalogError):
    pass


class NameTakenError(CatalogError):
    pass


class StaleRevisionError(CatalogError):
    def __init__(self, message: str, *, current: int) -> None:
        super().__init__(message)
        self.current = current


class RevisionRequiredError(CatalogError):
    pass


class NotDeletedError(CatalogError):
    pass


class NameMismatchError(CatalogError):
    pass


class BreakingChangeError(CatalogError):
    """A save that would break the revision it replaces, not marked as breaking: nothing was
    written; `findings` says what it breaks (kiln.catalog.breaking)."""

    def __init__(self, message: str, *, findings: list[dict[str, object]]) -> None:
        super().__init__(message)
        self.findings = findings


class CatalogBusyError(CatalogError):
    """Other writes took the catalog's version step every time this one tried: nothing was
    written; the same request may be sent again (after `retry_after_s`)."""

    def __init__(self, message: str, *, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s
