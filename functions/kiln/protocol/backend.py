"""What the protocol layer needs from the rest of Kiln. Implemented outside `protocol/`."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:
    from kiln.protocol.idempotency import Once
    from kiln.protocol.inner import CallLink
    from kiln.protocol.streaming import Outbox
    from kiln.protocol.talking import Turn

TaskSupport = Literal["optional", "required"]
TaskStatus = Literal["working", "input_required", "completed", "failed", "cancelled"]
TERMINAL_STATUSES: frozenset[str] = frozenset({"completed", "failed", "cancelled"})


@dataclass(frozen=True)
class ToolView:
    """A callable tool as MCP sees it (the head revision of an enabled catalog tool)."""

    name: str
    description: str
    input_schema: Mapping[str, Any]
    title: str | None = None
    output_schema: Mapping[str, Any] | None = None
    annotations: Mapping[str, Any] | None = None  # readOnlyHint, destructiveHint, ...
    updated_at: str = ""  # ISO 8601 UTC; tools/list orders by this, newest first, then name
    meta: Mapping[str, Any] | None = None  # extra `_meta` for versions that know it
    task_support: TaskSupport | None = None  # None: calls always run inside the request
    revision: str = ""  # what a sealed requestState is bound to beside the name
    # A task tool whose questions come first, inside the request (input_required); the task
    # starts when its script says so ({"task": true}, see kiln/runner/TALKING.md).
    asks_first: bool = False
    tags: tuple[str, ...] = ()  # not on the wire: what search mode ranks beside the text
    calls: tuple[str, ...] = ()  # not on the wire: the tools its script may call (inner.py)
    # Not on the wire: people one of whom must approve this call first (kiln.access.waiting);
    # the call becomes a task that waits for them.
    waits_for: tuple[str, ...] = ()


# How tools/list shows a request's tools: every tool ("list"), the meta-tools that search,
# describe and call them ("search": protocol/discovery.py), or search, describe and `execute`,
# which runs code that calls them ("code": protocol/discovery.py, serving/codemode.py).
Mode = Literal["list", "search", "code"]
MODES: tuple[Mode, ...] = ("list", "search", "code")


@dataclass(frozen=True)
class Served:
    """The tools a request may see and how tools/list shows them. A backend that keeps its
    catalog in memory hands out the same object while nothing changed (listing.py, whose
    caches recognise a list by identity)."""

    tools: Sequence[ToolView]
    mode: Mode = "list"


@dataclass(frozen=True)
class ToolOutcome:
    """What running a tool produced, already in the script contract's text form."""

    text: str  # the contract text: stdout or "(no output)", then [stderr] / [exit N] / [timeout]
    is_error: bool
    stdout: str = ""  # the raw stdout, for structuredContent and the `kiln/content` shape
    # (protocol/content.py); `text` should start with it, so notes after it are kept
    questions: tuple[Question, ...] = ()  # what the run asked instead of answering
    escalate: bool = False  # the run asked to go on as a task (a tool that asks first)
    timed_out: bool = False  # the run was killed at its time limit (the runner says so)
    # The tool did not start because its packages are still being built: the caller tries
    # again in a moment; the ledger says `not_ready`, never the tool's error.
    not_ready: bool = False
    # The call cannot run until the person opens a page (connects their account: kiln.
    # connections); `text` says so with the link, for clients that cannot be asked
    # (connecting.py turns it into a URL-mode elicitation where the client can).
    elicit: UrlElicitation | None = None


@dataclass(frozen=True)
class UrlElicitation:
    """A URL-mode elicitation a call needs first: the page, why, and its id (not secret)."""

    key: str  # the input request's key on 2026-07-28, e.g. `kiln/connect/github`
    url: str
    message: str
    elicitation_id: str


@dataclass(frozen=True)
class Question:
    """One thing a run asked for: `method` is elicitation/create, sampling/createMessage or
    roots/list, `params` that request's params, `key` the script's name for the answer."""

    key: str
    method: str
    params: Mapping[str, Any]


# What a run is told of its conversation (CallContext.conversation): the answers so far
# (key -> the client's answer), the kinds of question the caller can answer ("elicitation",
# "sampling", "roots"), and `hear(kind, fields)` for progress and log lines as they come
# (kind "progress": progress, total, message; kind "log": level, data, logger).
# `state_id` names the sealed requestState the answers came back with (None: none): the same
# state sent twice has the same id, so what it allows once (an approval) can be spent once.
@dataclass(frozen=True)
class Conversation:
    answers: Mapping[str, Any] = field(default_factory=dict)
    can_ask: tuple[str, ...] = ()
    hear: Callable[[str, Mapping[str, Any]], None] | None = None
    can_task: bool = False  # this run may hand the rest of its work to a task
    state_id: str | None = None
    calls: tuple[str, ...] = ()  # the tools this run may call (KILN_CALLS; inner.py)


class Book(Protocol):
    """Where the backend leaves a call's blocking bookkeeping (ledger writes, quota refunds)
    for the edge that answers it (`kiln.accounting.account.CallBook`, made by
    `kiln.api.mcp_serving`)."""

    def keep(self, work: Callable[[], object]) -> None: ...


@dataclass(frozen=True)
class Arrival:
    """How a request reached Kiln, for the backend's bookkeeping; the protocol passes it on
    unread. Set by the HTTP edge (`kiln.api.mcp_serving`, `kiln.api.tasks`)."""

    peer: tuple[int, int] | None = None  # (client port, server port) of a loopback request
    client_address: str | None = None  # anonymous callers' tasks are theirs by it
    # Where the backend leaves ledger writes and quota refunds, which start at once and which
    # the edge waits for before the answer leaves; None (stdio): the backend does them at once.
    book: Book | None = None
    author_run: bool = False  # an author's run over REST, not a `tools/call` (not ledgered)
    base_url: str | None = None  # how the client reached this server (connect links)


Outcome = Literal["ok", "error", "timeout", "rejected"]


@dataclass
class Seen:
    """What the protocol found a request to be, for the edge's log line and metrics (which so
    parse no body): its method, a tools/call's tool, and how it ended (None: not answered)."""

    method: str | None = None
    tool: str | None = None
    outcome: Outcome | None = None


class ServedView(Protocol):
    """The view a path such as /mcp/v/<name> serves, as the route found it (it is a
    `kiln.access.views.View`; the backend reads it as such). The protocol reads its name."""

    @property
    def name(self) -> str: ...


@dataclass(frozen=True)
class CallContext:
    """Per-request facts: what the transport knows, and what the protocol adds on the way
    down (`outbox`, `turn`, `conversation`). Every fact is a typed field (no string keys)."""

    time_left_s: float | None = None  # from the Lambda context, or a configured local budget
    principal: Any = None  # who is calling (auth: kiln.identity.policy.Principal); None: anonymous
    # The view a path such as /mcp/v/<name> serves: found once, by the route, and carried
    # down so that nothing reads it again by name.
    view: ServedView | None = None
    # This process may hold a request open for the client's answers (kiln dev); never in
    # Lambda, which answers each invocation once.
    can_hold: bool = False
    # What a session's client declared it can answer at `initialize` (elicitation, sampling,
    # roots): known on stdio, where the connection is the session; None where it is not.
    declared: tuple[str, ...] | None = None
    arrival: Arrival = field(default_factory=Arrival)
    outbox: Outbox | None = None  # where a streamed call's notifications go (dispatch.py)
    turn: Turn | None = None  # this tools/call's conversation turn (talking.py)
    conversation: Conversation | None = None  # what the run is told (set per round)
    seen: Seen | None = None  # filled in on the way down, read by the edge (observability)
    # This tools/call's place among calls that call tools: its ledger id, its parent's, the
    # tools above it and the bounds they share (kiln.protocol.inner). None: a call of its own.
    link: CallLink | None = None
    once: Once | None = None  # a call sent with an idempotency key (kiln.protocol.idempotency)


class ToolBackend(Protocol):
    async def list_tools(self, ctx: CallContext) -> Sequence[ToolView]:
        """Every tool the caller may see, in any order (the protocol sorts and pages). A
        backend may also offer `served_tools(ctx) -> Served`, which says how they are shown;
        without it they are listed (`list` mode)."""
        ...

    async def get_tool(self, name: str, ctx: CallContext) -> ToolView | None:
        """The named tool if it exists, is enabled and the caller may see it."""
        ...

    async def call_tool(
        self, tool: ToolView, arguments: Mapping[str, Any], ctx: CallContext
    ) -> ToolOutcome:
        """Run a tool whose arguments already passed its input schema. A backend that keeps
        a ledger may also offer `close_call(tool, is_error, ctx)`: told once the result is
        shaped whether the caller got an error (output that breaks the outputSchema is one
        though the run succeeded), it closes the call's account; a refusal it raises
        (ProtocolError: its ledger would not take the entry) becomes the call's answer."""
        ...


@dataclass(frozen=True)
class TaskRecord:
    """A task as the protocol shows it; `result` / `error` are set once it is terminal.

    `result` is the CallToolResult the run produced, shaped for the revision that created
    the task; `error` a JSON-RPC error object (`code`, `message`, optional `data`) when the
    run ended in a protocol-level failure instead.
    """

    task_id: str
    status: TaskStatus
    created_at: str  # ISO 8601 UTC
    last_updated_at: str
    ttl_ms: int | None
    poll_interval_ms: int | None = None
    status_message: str | None = None
    result: Mapping[str, Any] | None = None
    error: Mapping[str, Any] | None = None
    # `input_required`: the questions still open, key -> {"method": ..., "params": ...}
    input_requests: Mapping[str, Any] | None = None
    meta: Mapping[str, Any] | None = None  # the task's `_meta` (a waiting approval's)

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES


class TaskRefusedError(Exception):
    """A task the backend will not start now (a cap on running tasks); the message says why."""


class TaskAnswerError(ValueError):
    """An answer of the wrong type for its task's question; the message names it."""


class TaskCursorError(ValueError):
    """A `tasks/list` cursor the backend did not issue."""


class TaskBackend(Protocol):
    """Long-running tool calls: stored records, run elsewhere, looked up by id and caller.

    Lookups are bound to the caller: an id the caller did not create (or that expired, or
    never existed) is None, never another caller's task.
    """

    async def create_task(
        self,
        tool: ToolView,
        arguments: Mapping[str, Any],
        ctx: CallContext,
        *,
        version: str,
        ttl_ms: int | None,
        answers: Mapping[str, Any] | None = None,
        again: bool = False,
    ) -> TaskRecord:
        """Store a `working` task durably and start its run; raises TaskRefusedError.
        `answers`: what a tool that asks first was told before it went on as a task.
        `again`: a call that waits for a person's approval from a client without tasks: the
        same caller's same call still kept is answered with its task, not a new one."""
        ...

    async def get_task(self, task_id: str, ctx: CallContext) -> TaskRecord | None: ...

    async def update_task(
        self, task_id: str, responses: Mapping[str, Any], ctx: CallContext
    ) -> TaskRecord | None:
        """Answers for an `input_required` task's open questions (others are ignored); once
        none is open the task works again. Raises TaskAnswerError naming an answer of the
        wrong type for its question."""
        ...

    async def cancel_task(self, task_id: str, ctx: CallContext) -> TaskRecord | None:
        """Move a working task to `cancelled` (its run is stopped); terminal tasks stay."""
        ...

    async def list_tasks(
        self, ctx: CallContext, cursor: str | None
    ) -> tuple[Sequence[TaskRecord], str | None]:
        """The caller's tasks, one page; raises TaskCursorError for a cursor it did not issue."""
        ...
