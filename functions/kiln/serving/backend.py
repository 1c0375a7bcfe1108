"""Kiln's tools as MCP sees them: the catalog snapshot, bundles and the runner, joined."""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from kiln.access.approvals import Requirement, SpentApprovals, needs_approval, requirement
from kiln.access.quotas import QuotaExceededError
from kiln.access.resolve import ViewCatalog
from kiln.access.views import View
from kiln.access.waiting import waiting_for
from kiln.accounting.account import CallAccount, Caller, Limits, Ran
from kiln.accounting.gate import CallGate, CallTicket, bound_view, caller_of, key_limits, outcome_of
from kiln.accounting.idempotency import CallKeys
from kiln.aws.clients import StoreUnavailableError
from kiln.bundles.errors import BundleError, BundleNotReadyError
from kiln.catalog import fingerprint
from kiln.catalog.model import Revision, Tool
from kiln.catalog.snapshot import CatalogSnapshots, Snapshot
from kiln.protocol.backend import (
    CallContext,
    Conversation,
    Mode,
    Served,
    ServedView,
    ToolOutcome,
    ToolView,
)
from kiln.protocol.discovery import EXECUTE
from kiln.protocol.errors import RateLimitedError
from kiln.runner import InvalidArgumentsError, NodeUnavailableError, RunnerBusyError, afterwards
from kiln.runner.errors import RunSlotRefusedError
from kiln.serving.codemode import CodeMode
from kiln.serving.resolved import ResolvedTool, disabled_for, resolved, resolved_tool, tool_view
from kiln.serving.store_errors import NOT_RECORDED, admit, catalog_reads, unavailable

if TYPE_CHECKING:
    from kiln.runner import Runner
    from kiln.runner.model import RunResult
    from kiln.runner.remote import RemoteRunner
    from kiln.serving.packages import BundlePaths

# A call's side (the run, its talk, approvals, masking, packages) loads on the first tools/call,
# not in a cold start's first list (tests/functional/lambda/test_cold_start_imports.py).

log = logging.getLogger("kiln.serving.backend")


class SecretValues(Protocol):
    def values_for(self, tool: Tool) -> Mapping[str, str]: ...


class ConnectionTokens(Protocol):
    """The caller's own OAuth tokens a tool declares (kiln.connections.calls.RunTokens);
    LookupError, its message safe to show, when the caller must connect first (with the
    page to open as `url`, `provider`, `scopes`, `elicitation_id`: serving/connecting.py)."""

    def env_for(self, tool: Tool, principal: Any, base_url: str | None) -> Mapping[str, str]: ...


class AdmittedTask(NamedTuple):
    """What `admit_task` found: the tool, its call's ledger ticket, the approval it needs."""

    tool: Tool
    ticket: CallTicket | None
    required: Requirement | None = None


def _account(caller: Caller, tool: Tool, ctx: CallContext) -> CallAccount:
    """A new call's account; an inner call's names its parent (kiln.protocol.inner)."""
    link = ctx.link
    if link is None:
        return CallAccount(caller, tool)
    return CallAccount(caller, tool, id=link.id, parent=link.parent)


class CatalogBackend:
    """The `ToolBackend` of the public endpoint: enabled catalog tools, run by the runner.

    With `views`, a request bound to a view (by its path, its key or its token) sees that
    view's tools only, pinned ones at their pinned revision; anything else is "unknown".
    With `gate`, every call is admitted against quotas and recorded in the ledger.
    """

    def __init__(
        self,
        snapshots: CatalogSnapshots,
        runner: Runner,
        *,
        bundles: BundlePaths | None = None,
        secrets: SecretValues | None = None,
        views: ViewCatalog | None = None,
        gate: CallGate | None = None,
        remote: RemoteRunner | None = None,
        approvals: SpentApprovals | None = None,
        idempotency: CallKeys | None = None,
        mode: Mode = "list",
        connections: ConnectionTokens | None = None,
    ) -> None:
        self._snapshots = snapshots
        self.idempotency = idempotency  # keyed calls' answers (kiln.protocol.idempotency)
        self._connections = connections
        self._approvals = approvals  # each approval runs its tool once (kiln.access.approvals)
        self._mode = mode  # the root catalog's (KILN_CATALOG_MODE); a view says its own
        self._runner = runner
        self._remote = remote  # every run goes to the runner function (kiln.runner.remote)
        self._bundles = bundles
        self._secrets = secrets
        self._view_catalog = views
        self._gate = gate
        self._code = CodeMode()  # code mode's `execute`, made per request
        # Per view: the catalog version and its tools as served, a tuple (never changed, so
        # the protocol's lister recognises it by identity: kiln.protocol.listing).
        self._listed: dict[str | None, tuple[int, Served]] = {}

    async def list_tools(self, ctx: CallContext) -> Sequence[ToolView]:
        return (await self.served_tools(ctx)).tools

    @catalog_reads
    async def served_tools(self, ctx: CallContext) -> Served:
        """The tools this request may see, and its view's mode (else the root catalog's)."""
        snapshot = await self._snapshots.fresh()
        view, tools = await self._visible(snapshot, ctx)
        key = view.name if view else None
        cached = self._listed.get(key)
        if cached is not None and cached[0] == snapshot.version:
            return cached[1]
        listed = tuple(tool_view(tool) for tool in tools.values() if tool.enabled)
        served = Served(listed, view.mode if view is not None else self._mode)
        self._listed[key] = (snapshot.version, served)
        return served

    @catalog_reads
    async def get_tool(self, name: str, ctx: CallContext) -> ResolvedTool | None:
        """The tool a `tools/call` names, if this request may see it; the first half of the call.
        The one lookup of the call: what it found rides along in the ResolvedTool.

        With quotas, this is where the call is admitted: a key's quota is counted while the
        catalog version is read (one round trip hidden behind another), a view's after.
        Refused: RateLimitedError (and a `refused` ledger entry). A call admitted for a tool
        that turns out not to exist gives its count back.
        """
        gate = self._gate
        early = key_limits(ctx.principal) if gate is not None else ()
        admitting = None
        if gate is not None and early:
            admitting = asyncio.ensure_future(asyncio.to_thread(admit, gate, early))
        try:
            snapshot = await self._snapshots.fresh()
            view, tools = await self._visible(snapshot, ctx)
        except BaseException:
            if admitting is not None:
                await self._settle(admitting, early)
            raise
        tool = self._named(name, view, tools, snapshot.version, ctx)
        enabled = tool if tool is not None and tool.enabled else None
        account = None
        if gate is not None:
            account = await self._admission(ctx, caller_of(ctx.principal, view), enabled, admitting)
        if enabled is None:
            if tool is not None:  # disabled: its author is told why, others see it unknown
                disabled_for(name, ctx.principal)
            return None
        found = resolved_tool(enabled, view, account)
        waits: tuple[str, ...] = ()  # code mode's `execute` waits for no one (its calls may)
        if enabled is tools.get(name):
            waits = waiting_for(view, ctx.principal, enabled.head.annotations)
        return replace(found, waits_for=waits) if waits else found

    def _named(
        self, name: str, view: View | None, tools: dict[str, Tool], version: int, ctx: CallContext
    ) -> Tool | None:
        """The tool a call names: a catalog tool, or in code mode the request's own `execute`
        (kiln.serving.codemode), which the code it runs cannot call again."""
        mode = view.mode if view is not None else self._mode
        inner = ctx.link is not None and ctx.link.parent is not None
        if name != EXECUTE or mode != "code" or inner:
            return tools.get(name)
        caller = caller_of(ctx.principal, view).label
        return self._code.tool(view.name if view else None, caller, tools, version)

    async def _admission(
        self,
        ctx: CallContext,
        caller: Caller,
        tool: Tool | None,
        admitting: asyncio.Future[None] | None,
    ) -> CallAccount | None:
        """The account of a call of `tool`, charged to every quota of its caller: the key's
        (`admitting`, under way while the catalog was read), then the view's. No such tool
        (None): the key's count is given back. Refused: RateLimitedError, after the refused
        call is ledgered and what it had claimed given back."""
        gate = self._gate
        assert gate is not None
        account = _account(caller, tool, ctx) if tool is not None else None
        try:
            if admitting is not None:
                await admitting
                if account is None:
                    await self._later(ctx, gate.release, key_limits(ctx.principal))
                    return None
                account.charge(key_limits(ctx.principal))
            late = account.unclaimed() if account is not None else ()
            if account is not None and late:
                await asyncio.to_thread(admit, gate, late)
                account.charge(late)
        except QuotaExceededError as refused:
            if account is not None:
                await self._refused(ctx, account, refused)
            raise RateLimitedError(
                str(refused), retry_after_s=refused.retry_after_s, data=refused.data()
            ) from None
        return account

    async def _refused(
        self, ctx: CallContext, account: CallAccount, refused: QuotaExceededError
    ) -> None:
        """A quota refused the call: what it had claimed is given back (the key's count, when
        the view's quota refused it), and the call is ledgered as refused."""
        gate = self._gate
        assert gate is not None
        if account.claimed:
            await self._later(ctx, gate.release, account.claimed)
        await self._later(ctx, gate.refused, account, refused)

    @catalog_reads
    async def admit_task(
        self, tool: ToolView, arguments: Mapping[str, Any], ctx: CallContext
    ) -> AdmittedTask | None:
        """The tool a task for this request will run (its view's revision), the ticket its
        ledger entry and run-seconds charge are made from when it ends (None: not ledgered),
        and the approvals its view or key require of it (None: none). The call was admitted
        against the caller's quotas by `get_tool`, which the protocol asks first, as for a
        plain call, and which resolved the tool."""
        found: Tool | None
        if isinstance(tool, ResolvedTool):
            found, view = tool.tool, tool.view
        else:  # an author's run over REST: its route found the tool by its ref
            latest = self._snapshots.latest or await self._snapshots.fresh()
            view, tools = await self._visible(latest, ctx)
            found = tools.get(tool.name)
        if found is None or not found.enabled:
            return None
        required = requirement(view, ctx.principal)
        if required is not None and not needs_approval(required.policy, found.head.annotations):
            required = None
        gate = self._gate
        if gate is None or ctx.arrival.author_run:
            return AdmittedTask(found, None, required)
        ticket = gate.ticket(caller_of(ctx.principal, view), found, arguments)
        return AdmittedTask(found, ticket, required)

    @catalog_reads
    async def find(self, name: str, revision: int) -> Tool | None:
        """The enabled catalog tool with this name at `revision` (the task worker's lookup)."""
        tool = (await self._snapshots.fresh()).tools.get(name)
        if tool is None or not tool.enabled:
            return None
        if tool.head.number == revision:
            return tool
        pinned = await asyncio.to_thread(self._snapshots.revision, name, revision)
        return replace(tool, head=pinned)

    def view(self, tool: Tool) -> ToolView:
        return tool_view(tool)

    @catalog_reads
    async def call_tool(
        self, tool: ToolView, arguments: Mapping[str, Any], ctx: CallContext
    ) -> ToolOutcome:
        from kiln.serving.conversation import approval_for, approved_by, spent
        from kiln.serving.runs import run_shares

        call = resolved(tool)  # by get_tool, for this request: no second lookup
        found, view, account = self._code.in_language(call.tool, arguments), call.view, call.account
        gate = self._gate if account is not None else None
        started = time.time()
        talk = ctx.conversation
        approval = approval_for(requirement(view, ctx.principal), found, arguments, talk)
        approval = await spent(self._approvals, approval, found, arguments, talk)
        if approval is not None and approval.outcome is not None:  # asked, or not run
            if gate is not None and account is not None and approval.verdict is not None:
                await self._later(
                    ctx, gate.finish, account, "refused",
                    digest=gate.digest(arguments), started=started, run_seconds=0.0,
                    output_bytes=0, detail=approval.verdict,
                )  # fmt: skip
            return approval.outcome
        outcome, result = await self.execute(
            found, arguments, time_left_s=ctx.time_left_s, conversation=talk,
            shares=run_shares(found, ctx.principal, view), from_run=self._from_run(ctx),
            caller=(ctx.principal, ctx.arrival.base_url),
        )  # fmt: skip
        if gate is None or account is None:
            return outcome
        timed_out = result is not None and result.timed_out
        run_seconds = result.duration_s if result else 0.0  # a tool that never started: none
        charges = gate.charges(account.caller)
        if charges:  # spent before the answer: the caller's next call must see it
            await self._later(ctx, gate.charge_run, charges, run_seconds)
        account.ran = Ran(
            failed=outcome.is_error, timed_out=timed_out, not_ready=outcome.not_ready,
            digest=gate.digest(arguments), started=started, run_seconds=run_seconds,
            output_bytes=len(result.stdout.encode("utf-8", "replace")) if result else 0,
            detail=approved_by(approval, ctx.principal),
        )  # fmt: skip
        return outcome

    async def close_call(self, tool: ToolView, is_error: bool, ctx: CallContext) -> None:
        """The call's answer is shaped: its account is closed with the entry of what its last
        run did, an error if the caller got one (output that breaks the outputSchema)."""
        account = tool.account if isinstance(tool, ResolvedTool) else None
        gate, ran = self._gate, account.ran if account is not None else None
        if gate is None or account is None or ran is None or account.state == "closed":
            return
        kind = outcome_of(ran.failed or is_error, ran.timed_out, ran.not_ready)
        await self._recorded(
            ctx, gate.finish, account, kind, digest=ran.digest, started=ran.started,
            run_seconds=ran.run_seconds, output_bytes=ran.output_bytes, detail=ran.detail,
        )  # fmt: skip

    async def record_rejected(self, tool: ToolView, arguments: Any, ctx: CallContext) -> None:
        """Ledger a call answered with an isError result because its arguments broke the
        tool's schema (it was admitted, and counted, by `get_tool`)."""
        gate, account = self._gate, resolved(tool).account
        if gate is None or account is None:
            return
        digest = gate.digest(arguments if isinstance(arguments, dict) else {"": arguments})
        await self._later(
            ctx, gate.finish, account, "tool_error",
            digest=digest, started=time.time(), run_seconds=0.0, output_bytes=0,
        )  # fmt: skip

    async def _later(
        self, ctx: CallContext, fn: Callable[..., None], *args: Any, **kw: Any
    ) -> None:
        """Blocking bookkeeping (ledger, quota refunds): kept in the request's book where its
        edge offers one (`ctx.arrival.book`: it starts now, and the answer waits for it),
        else done now (stdio)."""
        book = ctx.arrival.book
        if book is not None:
            book.keep(functools.partial(fn, *args, **kw))
            return
        try:
            await asyncio.to_thread(fn, *args, **kw)
        except Exception:  # the call ran: answer it, and say loudly that its record is missing
            log.exception("call bookkeeping failed (%s)", getattr(fn, "__name__", fn))

    async def _recorded(
        self, ctx: CallContext, fn: Callable[..., None], *args: Any, **kw: Any
    ) -> None:
        """A call's ledger entry. Where the answer waits for bookkeeping anyway (a book: Lambda
        and `kiln dev`, so that an answered call is always in the ledger), it is written
        here, once the result is shaped and before it is sent: a store that refuses it
        (throttled) or does not answer makes the answer UnavailableError (NOT_RECORDED), not
        the result."""
        if ctx.arrival.book is None:
            await self._later(ctx, fn, *args, **kw)
            return
        try:
            if afterwards.alone():  # kiln dev's entry on disk: a millisecond, no hand-offs
                fn(*args, **kw)
            else:
                await asyncio.to_thread(fn, *args, **kw)
        except StoreUnavailableError as error:
            raise unavailable(NOT_RECORDED, error) from error
        except Exception:  # a bug, not the store: the call ran, so answer it, and say so
            log.exception("call bookkeeping failed (%s)", getattr(fn, "__name__", fn))

    async def _settle(self, admitting: asyncio.Future[None], limits: Limits) -> None:
        """An admission whose request failed before it could run: give its count back."""
        try:
            await admitting
        except Exception:
            return
        if self._gate is not None:
            await asyncio.to_thread(self._gate.release, limits)

    async def bound_sight(self, principal: Any) -> tuple[str | None, dict[str, Tool]] | None:
        """What `principal` sees over MCP when a view binds it: the view's name (None: it is
        gone) and its tools by name, pinned ones at their revision; None: not bound."""
        snapshot = await self._snapshots.fresh()
        view, tools = await self._visible(snapshot, CallContext(principal=principal))
        if tools is snapshot.tools:  # bound to no view: the whole catalog, as it is
            return None
        return (view.name if view is not None else None), tools

    async def _visible(
        self, snapshot: Snapshot, ctx: CallContext
    ) -> tuple[View | None, dict[str, Tool]]:
        """The view this request is bound to (if any) and the tools it may see."""
        catalog = self._view_catalog
        if catalog is None:
            return None, snapshot.tools
        if ctx.view is not None:  # the route found it (at this request's catalog version)
            served = self._served(ctx.view)
            return served, await self._tools_for(catalog, snapshot, served)
        principal = ctx.principal  # on /mcp: a key or token may be bound to a view
        if principal is None or not (principal.view or getattr(principal, "grants", None)):
            return None, snapshot.tools
        views = catalog.views_ready(snapshot.version)
        if views is None:
            views = await asyncio.to_thread(catalog.views_at, snapshot.version)
        name = bound_view(principal, views)
        if name is None:
            return None, snapshot.tools
        view = views.get(name)
        if view is None:  # bound to a view that is gone: nothing is visible
            return None, {}
        return view, await self._tools_for(catalog, snapshot, view)

    @staticmethod
    def _served(view: ServedView) -> View:
        if not isinstance(view, View):
            raise TypeError(f"CallContext.view must be the View its route found, not {view!r}")
        return view

    async def _tools_for(
        self, catalog: ViewCatalog, snapshot: Snapshot, view: View
    ) -> dict[str, Tool]:
        tools = catalog.cached(snapshot.version, view.name)
        if tools is None:
            tools = await asyncio.to_thread(self._resolve, catalog, snapshot, view)
        # A pinned revision's bundle may be one no head uses: what it resolved to, read once.
        bundles = {t.head.bundle_id for t in tools.values() if t.head.bundle_id}
        if not bundles <= snapshot.packages.keys():
            await asyncio.to_thread(self._snapshots.cover, snapshot, bundles)
        return tools

    def _resolve(self, catalog: ViewCatalog, snapshot: Snapshot, view: View) -> dict[str, Tool]:
        """The view's tools (blocking); its pins by fingerprint are checked knowing what their
        revisions' bundles resolved to."""
        self._snapshots.cover(snapshot, catalog.fingerprint_pinned_bundles(view, snapshot.tools))
        return catalog.tools_for(snapshot.version, view, snapshot.tools)

    async def execute(
        self,
        tool: Tool,
        arguments: Mapping[str, Any],
        *,
        time_left_s: float | None,
        conversation: Conversation | None = None,
        shares: tuple[str, ...] = (),
        from_run: Callable[[], bool] | None = None,
        author: bool = False,
        caller: tuple[Any, str | None] = (None, None),
    ) -> tuple[ToolOutcome, RunResult | None]:
        """Run a catalog tool's head revision; the outcome is shaped as the contract says.

        The RunResult is None when the tool could not start (bundle not ready, runner busy).
        `shares` name whose run it is (kiln.runner.slots; the tool's own at least). `author`:
        the tool's author runs it (a test run), who is told why its packages failed.
        """
        from kiln.serving.packages import cannot_run

        whose = {"shares": shares or (f"tool:{tool.id}",), "from_run": from_run, "caller": caller}
        if self._remote is not None:  # the runner function fetches the bundle itself
            try:
                return await self._run(tool, arguments, None, time_left_s, whose, conversation)
            except BundleError as error:  # not ready: said as a local run says it
                return cannot_run(tool, error, author=author), None
        with ExitStack() as pinned:
            try:
                bundle_path = await self._bundle_path(tool, pinned)
            except BundleError as error:
                return cannot_run(tool, error, author=author), None
            return await self._run(tool, arguments, bundle_path, time_left_s, whose, conversation)

    def _from_run(self, ctx: CallContext) -> Callable[[], bool] | None:
        peer = ctx.arrival.peer
        if peer is None:
            return None
        return functools.partial(self._runner.from_run, *peer)

    async def _run(
        self,
        tool: Tool,
        arguments: Mapping[str, Any],
        bundle_path: Path | None,
        time_left_s: float | None,
        whose: Mapping[str, Any],
        conversation: Conversation | None = None,
    ) -> tuple[ToolOutcome, RunResult | None]:
        from kiln.runner.remote import failed_run, too_large_for_lambda
        from kiln.serving.connecting import page_for
        from kiln.serving.conversation import run_fields, tool_outcome
        from kiln.serving.masking import Masker
        from kiln.serving.runs import run_request

        head = tool.head
        code, files = await self._source(head)
        whose = dict(whose)
        caller = whose.pop("caller", (None, None))
        tokens: Mapping[str, str] = {}
        try:
            extra_env = (
                dict(await asyncio.to_thread(self._secrets.values_for, tool))
                if self._secrets is not None and head.secrets
                else {}
            )
            if head.connections:  # the caller's own tokens (kiln.connections), after secrets
                tokens = await asyncio.to_thread(self._connection_env, tool, *caller)
                extra_env.update(tokens)
        except LookupError as error:  # a declared secret is not set, or no connection yet
            said = f"Tool {tool.name!r} cannot run: {error}"
            return ToolOutcome(said, True, elicit=page_for(tool.name, error)), None
        mask = Masker(tokens)  # what the run says back never carries them (masking.py)
        conversation = mask.conversation(conversation) if mask else conversation
        request = run_request(
            tool,
            code,
            files,
            bundle_path,
            arguments,
            time_left_s=time_left_s,
            env=extra_env,
            **whose,
            **run_fields(conversation, tool.name),
        )
        try:
            if self._remote is not None:
                result = await self._remote.run(
                    request, tool_id=tool.id, author=head.created_by, bundle_id=head.bundle_id,
                    resolved=fingerprint.build_of(tool),
                )  # fmt: skip
            elif (too_large := too_large_for_lambda(request, tool_id=tool.id)) is not None:
                result = failed_run(too_large, request.timeout_s)  # as on AWS
            else:
                result = await self._runner.run(request)
        except (RunnerBusyError, RunSlotRefusedError, NodeUnavailableError,
                InvalidArgumentsError) as error:  # fmt: skip
            return ToolOutcome(str(error), True), None
        result = mask.result(result) if mask else result
        return tool_outcome(tool.name, result), result

    async def _source(self, head: Revision) -> tuple[str, Mapping[str, bytes]]:
        """A revision's code and files (code mode's `execute`: its program, made here)."""
        program = self._code.source(head)
        if program is not None:
            return program.code, program.files
        # A thread hop only for what may do I/O: on a busy machine each one waits for a
        # worker thread to be scheduled, and a warm call usually needs none.
        code = self._snapshots.cached_code(head)
        if code is None:
            code = await asyncio.to_thread(self._snapshots.code, head)
        files = await asyncio.to_thread(self._snapshots.files, head) if head.files else {}
        return code, files

    def warm(self, tool: Tool, *, bundle_wait_s: float = 0.0) -> bool | None:
        """Have a standby wait for `tool`'s head revision (blocking: from a thread), so that
        its first call starts as warm as its second; waits up to `bundle_wait_s` for a bundle
        still being built. False where there are no standbys, or the bundle failed; None when
        the bundle is still being built after `bundle_wait_s`."""
        from kiln.serving.packages import wait_for_bundle
        from kiln.serving.runs import run_request

        head = tool.head
        # The save changed the catalog: read it here, so that the call does not have to.
        self._snapshots.current()
        code = self._snapshots.cached_code(head) or self._snapshots.code(head)
        files = self._snapshots.files(head) if head.files else {}
        with ExitStack() as pinned:
            bundle_path = None
            if head.bundle_id is not None and self._bundles is not None:
                try:
                    bundle_path = wait_for_bundle(
                        self._bundles, head.bundle_id, pinned, bundle_wait_s
                    )
                except BundleNotReadyError:
                    return None  # still being built
                if bundle_path is None:
                    return False
            return self._runner.prepare(run_request(tool, code, files, bundle_path, {}))

    def _connection_env(self, tool: Tool, *caller: Any) -> Mapping[str, str]:
        if self._connections is None:  # a tool acting for its caller (kiln.connections)
            raise LookupError("it acts for its caller, and this server has no vault key")
        return self._connections.env_for(tool, *caller)

    def warm_secrets(self, tool: Tool) -> None:
        """Fetch `tool`'s secrets as its call would (cached as the call's are, for the same
        time); MissingSecretsError while one is not set yet."""
        if self._secrets is not None and tool.head.secrets:
            self._secrets.values_for(tool)

    async def _bundle_path(self, tool: Tool, pinned: ExitStack) -> Path | None:
        """Its bundle: the build its served fingerprint names (fingerprint.build_of), no other."""
        bundle_id = tool.head.bundle_id
        if bundle_id is None or self._bundles is None:
            return None
        in_use = self._bundles.use(bundle_id, fingerprint.build_of(tool))
        return await asyncio.to_thread(pinned.enter_context, in_use)
