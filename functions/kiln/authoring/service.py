"""The authoring service: every catalog write, and every read that shows source.

REST (`kiln.api.tools`), the `/admin/mcp` built-in tools (`kiln.authoring.admin`), tool
folders (`kiln tools push` through REST, `kiln dev` through `FolderTarget`) and the studio
all come here; none of them talks to the catalog store. Each write runs the same steps:
check the submission (`catalog.rules`), write conditionally (`catalog.store`), log one
audit line, and only then ask for the dependency bundle, so a refused save builds nothing.

The methods block (boto3): async callers run them with `asyncio.to_thread`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import CancelledError, Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

from kiln.access.secrets import SecretError
from kiln.authoring.serialise import definition, draft_of
from kiln.aws.clients import StoreUnavailableError
from kiln.catalog.breaking import checked, said_breaking
from kiln.catalog.errors import ToolNotFoundError
from kiln.catalog.model import Draft, Revision, Tool, definition_of
from kiln.catalog.rules import check_draft, check_name
from kiln.catalog.store import CatalogStore
from kiln.catalog.syntax import available_node, check_parses
from kiln.catalog.toolfiles import same_definition
from kiln.errors import KilnError
from kiln.identity.audit import created_by, record_write
from kiln.identity.policy import Principal
from kiln.protocol.backend import Conversation, ToolOutcome
from kiln.runner.model import RunResult
from kiln.schema.arguments import SchemaProblem, ValidatorCache, summarize

if TYPE_CHECKING:
    from kiln.serving.backend import CatalogBackend

ARGUMENTS_BUDGET_S = 1.0  # checking test-run arguments against a schema gives up after this
# A save answers once its tool's first run is prepared, but waits for that no longer than this.
WARM_WAIT_S = 2.0

log = logging.getLogger("kiln.authoring")


class UndeclaredSecretError(SecretError, status=422, rest_code="undeclared_secret"):
    """A secret name the tool does not declare: setting it would reach no script."""


class ArgumentsRejectedError(KilnError, ValueError, status=422, rest_code="invalid_arguments"):
    """A test run's arguments do not match the tool's input schema (or are not an object)."""


class BundleRequests(Protocol):
    """Starts a tool's dependency bundle build (`kiln.bundles.hooks.Bundles`)."""

    def prepare(self, language: str, requirements: tuple[str, ...]) -> str | None: ...


class Warming(Protocol):
    """Prepares a saved tool's first run (kiln.serving.warming.Warmer): the future is done
    once its standby waits (or none will, for now)."""

    def warm_soon(self, tool: Tool) -> Future[bool] | None: ...


class SecretNames(Protocol):
    """A tool's secrets (`kiln.access.secrets.SecretStore`): which are set; set or remove one."""

    def names(self, tool_id: str) -> list[str]: ...

    def set(self, tool_id: str, name: str, value: str) -> None: ...

    def delete(self, tool_id: str, name: str) -> None: ...


@dataclass(frozen=True)
class ToolSource:
    """A tool with its head revision's source and files."""

    tool: Tool
    code: str
    files: Mapping[str, bytes] = field(default_factory=dict)


@dataclass(frozen=True)
class TestRun:
    """An author's test run: the outcome as MCP would show it, and the run's details."""

    outcome: ToolOutcome
    result: RunResult | None  # None when the tool could not start
    # What the script said while it ran (progress and log lines, in order) and asked.
    talk: tuple[dict[str, Any], ...] = ()

    def to_json(self) -> dict[str, Any]:
        result, text = self.result, self.outcome.text
        if result is None:
            return {"ok": False, "error": text, "text": text}
        questions = [
            {"key": q.key, "method": q.method, "params": dict(q.params)}
            for q in self.outcome.questions
        ]
        return {
            "talk": list(self.talk),
            "questions": questions,
            "ok": not result.failed,
            "stdout": result.stdout,
            "stderr": result.stderr,
            "exit_code": result.exit_code,
            "timed_out": result.timed_out,
            "duration_ms": round(result.duration_s * 1000, 1),
            "applied_timeout_s": result.applied_timeout_s,
            "stdout_truncated": result.stdout_truncated,
            "stderr_truncated": result.stderr_truncated,
            # Prepared before the call (a standby: kiln.runner.standby), not started cold.
            "standby": result.standby,
            # ... and seen waiting for the call before it came (its interpreter had started).
            "ready": result.ready,
            # What kept the run apart, exactly as it held: never more.
            "isolation": result.isolation,
            "fence": result.fence or "none",
            "mark": result.mark or "none",
            "text": text,
        }


class AuthoringService:
    """Catalog writes and source reads, for every client that authors tools."""

    def __init__(
        self,
        store: CatalogStore,
        *,
        bundles: BundleRequests | None = None,
        executor: CatalogBackend | None = None,  # runs a test run (a head revision)
        secrets: SecretNames | None = None,
        warmer: Warming | None = None,
        warm_wait_s: float = WARM_WAIT_S,
    ) -> None:
        self._store = store
        self._bundles = bundles
        self._executor = executor
        self._secrets = secrets
        self._warmer = warmer
        self._warm_wait_s = warm_wait_s
        self._validators = ValidatorCache()
        self._node = available_node()  # for the save-time syntax check of Node scripts

    # -- reads -------------------------------------------------------------------------

    def list_tools(self, *, include_deleted: bool = False) -> list[Tool]:
        return sorted(self._store.list_tools(include_deleted=include_deleted), key=_by_name)

    def get(self, ref: str) -> Tool:
        return self._store.get(ref)

    def read(self, ref: str) -> ToolSource:
        """A tool (by name, or `id:<id>`) with its source."""
        tool = self._store.get(ref)
        head = tool.head
        return ToolSource(tool, self._store.code(head), self._store.files(head))

    def read_served(self, tool: Tool) -> ToolSource:
        """`tool` as a view serves it (its head may be a pinned revision), with that source."""
        return ToolSource(tool, self._store.code(tool.head), self._store.files(tool.head))

    def revisions(self, ref: str) -> list[Revision]:
        return self._store.revisions(ref)

    def revision(self, ref: str, number: int) -> tuple[Revision, str]:
        """One revision of a tool with its source."""
        revision = self._store.revision(ref, number)
        return revision, self._store.code(revision)

    def secret_status(self, ref: str) -> tuple[Tool, list[dict[str, Any]]]:
        """The tool, and each secret it declares or still has set: declared? set? (no values)."""
        tool = self._store.get(ref)
        present = set(self._secrets.names(tool.id)) if self._secrets is not None else set()
        declared = set(tool.head.secrets)
        listed = [{"name": name, "set": name in present} for name in sorted(declared | present)]
        for entry in listed:  # set once, no longer declared: said, so it can be removed
            if entry["name"] not in declared:
                entry["declared"] = False
        return tool, listed

    def set_secret(self, ref: str, name: str, value: str, who: Principal | None) -> Tool:
        """Set a secret the tool declares; UndeclaredSecretError names the ones it does."""
        tool = self._store.get(ref)
        if name not in tool.head.secrets:
            raise UndeclaredSecretError(
                f"secret {name[:64]!r}: tool {tool.name!r} does not declare it (it declares: "
                f'{", ".join(tool.head.secrets) or "none"}); add it to "secrets" in the '
                "tool's definition first"
            )
        self._secret_store().set(tool.id, name, value)
        record_write(who, action="secret.set", tool_name=tool.name, tool_id=tool.id, secret=name)
        return tool

    def delete_secret(self, ref: str, name: str, who: Principal | None) -> Tool:
        tool = self._store.get(ref)
        self._secret_store().delete(tool.id, name)
        record_write(who, action="secret.delete", tool_name=tool.name, tool_id=tool.id, secret=name)
        return tool

    def _secret_store(self) -> SecretNames:
        if self._secrets is None:
            raise RuntimeError("this authoring service was made without a secret store")
        return self._secrets

    # -- writes ------------------------------------------------------------------------

    def create(self, payload: Mapping[str, Any], who: Principal | None) -> Tool:
        payload, _ = said_breaking(payload)  # a first revision breaks nothing: said or not
        return self.create_draft(self._checked(payload), who)

    def create_draft(self, draft: Draft, who: Principal | None, *, prepared: bool = True) -> Tool:
        """`prepared`: answer once the tool's first run is prepared (see `_committed`)."""
        try:
            tool = self._store.create(draft, actor=created_by(who))
        except StoreUnavailableError:
            applied = self._applied_create(draft, created_by(who))
            if applied is None:
                raise
            tool = applied
        return self._committed(who, "create", tool, prepared=prepared)

    def _applied_create(self, draft: Draft, actor: str) -> Tool | None:
        """After a create the store never answered: the tool, if the store applied it (the
        reply was what got lost), so the author hears 201 rather than a 503 they would retry
        into "already exists"; None when it was not applied, or is another's."""
        try:
            tool = self._store.get(draft.name)
        except ToolNotFoundError:
            return None
        head = tool.head
        if head.number == 1 and head.created_by == actor and same_definition(tool, draft):
            return tool
        return None

    def update(
        self,
        ref: str,
        payload: Mapping[str, Any],
        who: Principal | None,
        *,
        expected_revision: int | None,
        partial: bool = False,
    ) -> Tool:
        """A new revision from `payload`: the whole definition, or with `partial` only the
        fields to change (the rest are the current head's). `"breaking": true` in it saves a
        change that breaks the head's clients (refused otherwise: kiln.catalog.breaking)."""
        payload, breaking = said_breaking(payload)
        defaults = None
        if partial:
            current = self.read(ref)
            defaults = definition(current.tool, current.code, current.files)
        draft = self._checked(payload, defaults=defaults)
        if not partial and "files" not in payload:  # a client unaware of files keeps them
            draft = replace(draft, files=self.read(ref).files)
        return self.update_draft(
            ref, draft, who, expected_revision=expected_revision, breaking=breaking
        )

    def update_draft(
        self,
        ref: str,
        draft: Draft,
        who: Principal | None,
        *,
        expected_revision: int | None,
        prepared: bool = True,
        breaking: bool = False,
    ) -> Tool:
        found = self._breaks(ref, definition_of(draft), expected_revision, breaking)
        tool = self._store.update(
            ref, draft, expected_revision=expected_revision, actor=created_by(who), breaking=found
        )
        return self._committed(who, "update", tool, prepared=prepared)

    def restore(
        self,
        ref: str,
        number: int,
        who: Principal | None,
        *,
        expected_revision: int | None,
        breaking: bool = False,
    ) -> Tool:
        old = definition_of(self._store.revision(ref, number))
        found = self._breaks(ref, old, expected_revision, breaking)
        tool = self._store.restore(
            ref, number, expected_revision=expected_revision, actor=created_by(who),
            breaking=found,
        )  # fmt: skip
        return self._committed(who, "restore", tool)

    def _breaks(
        self, ref: str, new: Mapping[str, Any], expected: int | None, breaking: bool
    ) -> tuple[dict[str, Any], ...]:
        """What saving `new` over the head `expected` breaks (see kiln.catalog.breaking);
        nothing when the head is another (the store refuses the stale write)."""
        head = self._store.get(ref).head
        if expected is None or head.number != expected:
            return ()
        return checked(ref, definition_of(head), new, breaking=breaking)

    def rename(self, ref: str, new_name: str, who: Principal | None) -> Tool:
        check_name(new_name)
        tool = self._store.rename(ref, new_name, actor=created_by(who))
        return self._committed(who, "rename", tool)

    def set_enabled(self, ref: str, enabled: bool, who: Principal | None) -> Tool:
        tool = self._store.set_enabled(ref, enabled, actor=created_by(who))
        return self._committed(who, "enable" if enabled else "disable", tool)

    def delete(self, ref: str, who: Principal | None) -> Tool:
        tool = self._store.delete(ref, actor=created_by(who))
        return self._committed(who, "delete", tool)

    def undelete(self, ref: str, who: Principal | None) -> Tool:
        """A deleted tool (`id:<id>`) back under its name, while no live tool has taken it."""
        tool = self._store.undelete(ref, actor=created_by(who))
        return self._committed(who, "undelete", tool)

    # -- test runs ---------------------------------------------------------------------

    def check_arguments(self, tool: Tool, arguments: object) -> Mapping[str, Any]:
        """The arguments, if they are an object matching the tool's input schema."""
        if not isinstance(arguments, Mapping):
            raise ArgumentsRejectedError("arguments: must be a JSON object")
        try:
            problems = self._validators.problems(
                tool.head.input_schema, arguments, budget_s=ARGUMENTS_BUDGET_S
            )
        except SchemaProblem as problem:  # TooCostlyError too: over the time budget
            raise ArgumentsRejectedError(f"input_schema: {problem}") from None
        if problems:
            raise ArgumentsRejectedError(summarize(tool.name, problems))
        return arguments

    async def test_run(
        self,
        tool: Tool,
        arguments: object,
        *,
        time_left_s: float | None,
        answers: Mapping[str, Any] | None = None,
        hear: Callable[[dict[str, Any]], None] | None = None,
    ) -> TestRun:
        """Run the tool's head as an author's test (disabled tools run too). `answers`: what
        the author answered to the questions of the run before (key -> answer); `hear` gets
        each progress or log line as the script writes it (on the event loop)."""
        if self._executor is None:
            raise RuntimeError("this authoring service was made without an executor")
        # Off the event loop: a costly schema must not hold up other requests.
        checked = await asyncio.to_thread(self.check_arguments, tool, arguments)
        heard: list[dict[str, Any]] = []

        def said(kind: str, fields: Mapping[str, Any]) -> None:
            heard.append({"kind": kind, **fields})
            if hear is not None:
                hear(heard[-1])

        # The author plays the client, and answers the script's calls too (the studio makes
        # each for real, or takes a result typed by hand): KILN_CALLS is the tool's own.
        talk = Conversation(
            dict(answers or {}), ("elicitation", "sampling", "roots"), said,
            calls=tool.head.calls,
        )  # fmt: skip
        outcome, result = await self._executor.execute(
            tool, checked, time_left_s=time_left_s, conversation=talk, author=True
        )
        return TestRun(outcome, result, tuple(heard))

    # -- internals ---------------------------------------------------------------------

    def _checked(
        self, payload: Mapping[str, Any], *, defaults: Mapping[str, Any] | None = None
    ) -> Draft:
        """The save rules, then the script must parse (Python compiles, `node --check`)."""
        draft = check_draft(payload, defaults=defaults)
        check_parses(draft.language, draft.code, self._node)
        return draft

    def _committed(
        self, who: Principal | None, action: str, tool: Tool, *, prepared: bool = True
    ) -> Tool:
        """After a write: the audit line, the bundle build, and (with `prepared`) the answer
        waits until the tool's first run is prepared, so that a call sent the moment the save
        answers starts from a standby (bounded by `warm_wait_s`; a bundle still being built is
        not waited for). Loading many folders at once does not wait."""
        record_write(
            who, action=action, tool_name=tool.name, tool_id=tool.id, revision=tool.head.number
        )
        if action in ("create", "update", "restore"):
            self._request_bundle(tool.head)
        warming = self._warmer.warm_soon(tool) if self._warmer is not None else None
        if prepared and warming is not None:
            try:
                warming.result(timeout=self._warm_wait_s)
            except (FutureTimeout, CancelledError):  # slow: the call may start cold; no harm
                log.info("the first run of %s was not prepared in time", tool.name)
        return tool

    def _request_bundle(self, revision: Revision) -> None:
        # Only after the write committed: a refused save must not start a build.
        if self._bundles is None or revision.bundle_id is None:
            return
        try:
            self._bundles.prepare(revision.language, revision.requirements)
        except Exception:  # the tool is saved; its calls will say the bundle is missing
            log.exception("could not start the bundle build for %s", revision.bundle_id)


def _by_name(tool: Tool) -> str:
    return tool.name


class FolderTarget:
    """`catalog.files.SyncTarget` over the authoring service: how `kiln dev` loads folders."""

    def __init__(self, service: AuthoringService, who: Principal | None = None) -> None:
        self._service = service
        self._who = who

    def current(self, name: str) -> tuple[Draft, int] | None:
        try:
            found = self._service.read(name)
        except ToolNotFoundError:
            return None
        return draft_of(found.tool, found.code, found.files), found.tool.head.number

    def create(self, draft: Draft) -> None:
        self._service.create_draft(draft, self._who, prepared=False)

    def update(self, draft: Draft, revision: int) -> None:
        # The author's own folders, loaded by `kiln dev`: a breaking change is saved and
        # recorded (views that follow the latest still hold it until their owner accepts).
        self._service.update_draft(
            draft.name, draft, self._who, expected_revision=revision, prepared=False,
            breaking=True,
        )  # fmt: skip


__all__: Sequence[str] = (
    "ArgumentsRejectedError",
    "AuthoringService",
    "FolderTarget",
    "TestRun",
    "ToolSource",
)
