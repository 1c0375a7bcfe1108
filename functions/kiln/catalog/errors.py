"""The catalog's refusals, raised by `kiln.catalog.store`; each carries its answer
(`kiln.errors.KilnError`: HTTP status, REST code, JSON-RPC code)."""

from __future__ import annotations

from kiln.errors import KilnError, NameTaken, NotFound, StaleRevision


class CatalogError(KilnError):
    """Base of the catalog's refusals: 400 `bad_request` unless a subclass says otherwise."""


class ToolNotFoundError(CatalogError, NotFound):
    pass


class RevisionNotFoundError(CatalogError, NotFound):
    pass


class NameTakenError(CatalogError, NameTaken):
    pass


class StaleRevisionError(CatalogError, StaleRevision):
    pass


class RevisionRequiredError(CatalogError, status=428, rest_code="revision_required"):
    pass


class NotDeletedError(CatalogError, status=409, rest_code="not_deleted"):
    pass


class NameMismatchError(CatalogError, status=422, rest_code="name_mismatch"):
    pass


class BreakingChangeError(CatalogError, status=409, rest_code="breaking_change"):
    """A save that would break the revision it replaces, not marked as breaking: nothing was
    written; `findings` says what it breaks (kiln.catalog.breaking)."""

    def __init__(self, message: str, *, findings: list[dict[str, object]]) -> None:
        super().__init__(message, data={"findings": findings})
        self.findings = findings


class CatalogBusyError(CatalogError, status=409, rest_code="catalog_busy"):
    """Other writes took the catalog's version step every time this one tried: nothing was
    written; the same request may be sent again (after `retry_after_s`)."""

    def __init__(self, message: str, *, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s

    def headers(self) -> dict[str, str]:
        return {"retry-after": str(self.retry_after_s)}
