"""The catalog's refusals, raised by `kiln.catalog.store`; each carries its answer
(`kiln.errors.KilnError`: HTTP status, REST code, JSON-RPC code)."""

from __future__ import annotations

from kiln.errors import KilnError


class CatalogError(KilnError):
    """Base of the catalog's refusals: 400 `bad_request` unless a subclass says otherwise."""


class ToolNotFoundError(CatalogError):
    status, rest_code = 404, "not_found"


class RevisionNotFoundError(CatalogError):
    status, rest_code = 404, "not_found"


class NameTakenError(CatalogError):
    status, rest_code = 409, "name_taken"


class StaleRevisionError(CatalogError):
    status, rest_code = 412, "stale_revision"

    def __init__(self, message: str, *, current: int) -> None:
        super().__init__(message, data={"current_revision": current})
        self.current = current


class RevisionRequiredError(CatalogError):
    status, rest_code = 428, "revision_required"


class NotDeletedError(CatalogError):
    status, rest_code = 409, "not_deleted"


class NameMismatchError(CatalogError):
    status, rest_code = 422, "name_mismatch"


class BreakingChangeError(CatalogError):
    """A save that would break the revision it replaces, not marked as breaking: nothing was
    written; `findings` says what it breaks (kiln.catalog.breaking)."""

    status, rest_code = 409, "breaking_change"

    def __init__(self, message: str, *, findings: list[dict[str, object]]) -> None:
        super().__init__(message, data={"findings": findings})
        self.findings = findings


class CatalogBusyError(CatalogError):
    """Other writes took the catalog's version step every time this one tried: nothing was
    written; the same request may be sent again (after `retry_after_s`)."""

    status, rest_code = 409, "catalog_busy"

    def __init__(self, message: str, *, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s

    def headers(self) -> dict[str, str]:
        return {"retry-after": str(self.retry_after_s)}
