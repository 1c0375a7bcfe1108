"""Kiln's one error type: a refusal that carries its own answer (the MCP SDK's `MCPError` is
the model: an error is its code, its message and its data).

A refusal is raised where it is found, as a subclass of `KilnError` that says, on its class or
its instance, how each edge answers it; no table maps it elsewhere. A subclass answers as its
parent until it says otherwise. The tree, drawn once:

    KilnError                      code, status, rest_code, message, data, headers()
    ├── ProtocolError              kiln.protocol.errors: MCP itself (parse, shape, era, method,
    │                              params, quota, store); its HTTP status follows the era
    ├── ApiError                   kiln.api.errors: the HTTP request itself (size, JSON, a header)
    ├── AuthError                  kiln.identity.policy: 400/401/403 with WWW-Authenticate
    ├── StoreUnavailableError      kiln.aws.clients: 503 with Retry-After; MCP -32000
    ├── CatalogError, RuleError    kiln.catalog.errors, kiln.catalog.violations
    ├── ViewError, SecretError     kiln.access.views, kiln.access.secrets
    ├── KeyStoreError              kiln.identity.keys
    ├── LedgerQueryError           kiln.accounting.ledger
    ├── BundleIdError, BundleStateError   kiln.bundles.store
    ├── ApprovalDecisionError      kiln.tasks.approving
    └── ArgumentsRejectedError, UndeclaredSecretError   kiln.authoring.service

Each edge translates it once: REST in `kiln.api.errors.rest_response` (`status`, and the body
`{"error": {"code": rest_code, "message": message, **data}}`), MCP in
`kiln.protocol.errors.error_answer` (`status`, a JSON-RPC error `{code, message, data}`, and
`headers()` on both). This module imports nothing of Kiln's: every room may raise one.
"""

from __future__ import annotations

from typing import Any

# JSON-RPC leaves -32000..-32099 to the server (implementation-defined errors): Kiln's own.
UNAVAILABLE = -32000  # the catalog store did not answer in time: retry later
UNAUTHORIZED = -32001  # no credential, or one that may not do this
REFUSED = -32002  # a request the application refused (a rule, a conflict, a missing thing)
RATE_LIMITED = -32029  # a quota refused the call

RequestId = int | str | None


class KilnError(Exception):
    """A refusal: how the REST and MCP edges answer it travels with it.

    `code` is the JSON-RPC error code; `status` the HTTP status; `rest_code` the REST body's
    `error.code` (None: REST never answers it, so one that escapes there is internal); `data`
    the JSON-RPC error's `data`, whose members a REST body carries beside code and message.
    """

    code: int = REFUSED
    status: int = 400
    rest_code: str | None = "bad_request"
    data: Any = None
    request_id: RequestId = None  # echoed in a JSON-RPC answer when known

    def __init_subclass__(
        cls, *, status: int | None = None, rest_code: str | None = None, **kw: Any
    ) -> None:
        """The answer said where the class is named: `class NotDeletedError(CatalogError,
        status=409, rest_code="not_deleted")`; what is not said is the parent's."""
        super().__init_subclass__(**kw)
        if status is not None:
            cls.status = status
        if rest_code is not None:
            cls.rest_code = rest_code

    def __init__(self, message: str = "", *, data: Any = None) -> None:
        super().__init__(message)
        self.message = message
        if data is not None:
            self.data = data

    @property
    def rpc_message(self) -> str:
        """The JSON-RPC error's message (the REST body says `message`)."""
        return self.message

    def headers(self) -> dict[str, str]:
        """HTTP headers the answer carries on either edge (Retry-After, WWW-Authenticate)."""
        return {}


# Answers several rooms give alike: a room's refusal derives from its room's base and one of
# these (`class ToolNotFoundError(CatalogError, NotFound)`), so that the answer is said once.


class NotFound(KilnError, status=404, rest_code="not_found"):
    """What the request names does not exist (or is not the caller's to see)."""


class NameTaken(KilnError, status=409, rest_code="name_taken"):
    """A create whose name another one already has."""


class StaleRevision(KilnError, status=412, rest_code="stale_revision"):
    """A write that carried a revision (If-Match) another write has replaced: `current`."""

    def __init__(self, message: str, *, current: int) -> None:
        super().__init__(message, data={"current_revision": current})
        self.current = current
