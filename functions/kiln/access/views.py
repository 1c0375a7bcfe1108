"""Views: named, versioned sets of tools, by name and/or tag, optionally pinned to a revision
or a fingerprint: what a view is, and the rules a definition must meet. Where views are kept:
`kiln.access.view_store`."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from kiln.access.approvals import CONFIRM_VALUES
from kiln.access.quotas import NO_QUOTA, Quota, QuotaRuleError, check_quota
from kiln.access.waiting import ApproversRuleError, check_approvers
from kiln.catalog.fingerprint import RULE as FINGERPRINT_RULE
from kiln.catalog.fingerprint import is_fingerprint
from kiln.catalog.names import TAG_RULE, is_tag
from kiln.errors import KilnError, NameTaken, NotFound, StaleRevision

NAME_RULE = "1-64 characters from a-z 0-9 _ -, starting with a letter or digit"
_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
_TOOL = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")  # wider than the tool name rule
MAX_ENTRIES = 200
MAX_DESCRIPTION = 1000
FIELDS = (
    "name",
    "description",
    "tools",
    "published",
    "anonymous",
    "quota",
    "oauth_scopes",
    "oauth_clients",
    "confirm",
    "approvers",
    "mode",
)
# How tools/list shows the view (kiln.protocol.backend.Mode; access does not import protocol)
Mode = Literal["list", "search", "code"]
MODES: tuple[Mode, ...] = ("list", "search", "code")


class ViewError(KilnError):
    """Base of the view refusals (`kiln.errors.KilnError`): 400 `bad_request` by default."""


class ViewRuleError(ViewError, status=422, rest_code="invalid_view"):
    """A view definition that breaks a rule; `problems` lists `(field, message)` pairs."""

    def __init__(self, problems: Sequence[tuple[str, str]]) -> None:
        self.problems = tuple(problems)
        super().__init__(
            "; ".join(f"{f}: {m}" for f, m in self.problems),
            data={"problems": [{"field": f, "message": m} for f, m in self.problems]},
        )


class ViewNotFoundError(ViewError, NotFound):
    pass


class ViewExistsError(ViewError, NameTaken):
    pass


class StaleViewError(ViewError, StaleRevision):
    pass


@dataclass(frozen=True)
class ViewEntry:
    """One line of a view: a tool name (maybe pinned: `name@3`, or `name@sha256:<hex>`, its
    fingerprint) or a tag selector `tag:x`."""

    tool: str | None = None
    tag: str | None = None
    pin: int | None = None  # a fingerprint's: the revision that had it when the view was saved
    tool_id: str | None = None  # the tool the name was bound to when the view was saved
    digest: str | None = None  # the pinned revision's content digest (kiln.access.pins)
    fingerprint: str | None = None  # pinned by fingerprint (kiln.catalog.fingerprint)

    def __str__(self) -> str:
        if self.tag is not None:
            return f"tag:{self.tag}"
        if self.fingerprint is not None:
            return f"{self.tool}@{self.fingerprint}"
        return f"{self.tool}@{self.pin}" if self.pin is not None else str(self.tool)


@dataclass(frozen=True)
class View:
    name: str
    entries: tuple[ViewEntry, ...]
    description: str = ""
    published: bool = False  # served on its own path, /mcp/v/<name>
    anonymous: bool = False  # that path answers without a credential
    quota: Quota = NO_QUOTA  # shared by every call made through the view
    oauth_scopes: tuple[str, ...] = ()  # a token with one of these scopes is bound to the view
    oauth_clients: tuple[str, ...] = ()  # ... as is a token issued to one of these clients
    # "destructive" / "writes": the user approves such calls first (access/approvals.py)
    confirm: str | None = None
    # people one of whom approves those calls instead of the caller (access/waiting.py)
    approvers: tuple[str, ...] = ()
    # "search": tools/list shows the meta-tools that search, describe and call the view's
    # tools instead of the tools themselves (kiln.protocol.discovery); "code": search,
    # describe and `execute`, which runs Python that calls them (kiln.serving.codemode)
    mode: Mode = "list"
    revision: int = 0
    updated_at: str = ""
    updated_by: str = ""
    # Breaking revisions its owner accepted (kiln.access.holds): those made before `since`
    # (when the view was made), and each tool's up to a number (tool id -> revision).
    since: str = ""
    accepted: Mapping[str, int] = field(default_factory=dict)

    def definition(self) -> dict[str, Any]:
        """The view as an author writes it (REST body, view file)."""
        body: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "tools": [str(entry) for entry in self.entries],
            "published": self.published,
            "anonymous": self.anonymous,
        }
        if not self.quota.empty:
            body["quota"] = {k: v for k, v in self.quota.as_dict().items() if v is not None}
        if self.oauth_scopes:
            body["oauth_scopes"] = list(self.oauth_scopes)
        if self.oauth_clients:
            body["oauth_clients"] = list(self.oauth_clients)
        if self.confirm is not None:
            body["confirm"] = self.confirm
        if self.approvers:
            body["approvers"] = list(self.approvers)
        if self.mode != "list":
            body["mode"] = self.mode
        return body

    def as_json(self) -> dict[str, Any]:
        return {
            **self.definition(),
            "revision": self.revision,
            "updated_at": self.updated_at,
            "updated_by": self.updated_by,
        }


def check_view_name(name: object) -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ViewRuleError([("name", f"must be {NAME_RULE}")])
    return name


def parse_entry(text: object, where: str) -> ViewEntry:
    """`add_vat`, `add_vat@3` or `tag:finance`; ViewRuleError names `where` otherwise."""
    if not isinstance(text, str):
        raise ViewRuleError([(where, "must be a string: a tool name, name@revision or tag:<tag>")])
    if text.startswith("tag:"):
        tag = text[4:]
        if "@" in tag:
            raise ViewRuleError([(where, "a tag selector cannot be pinned; pin tools by name")])
        if not is_tag(tag):
            raise ViewRuleError([(where, f"the tag must be {TAG_RULE}")])
        return ViewEntry(tag=tag)
    name, at, pin = text.partition("@")
    if not _TOOL.fullmatch(name):
        raise ViewRuleError([(where, "must be a tool name, name@revision or tag:<tag>")])
    if pin.startswith("sha256:"):
        if not is_fingerprint(pin):
            raise ViewRuleError([(where, f"after @: {FINGERPRINT_RULE}")])
        return ViewEntry(tool=name, fingerprint=pin)
    if at:
        if not re.fullmatch(r"[1-9][0-9]{0,7}", pin):
            raise ViewRuleError(
                [(where, "after @: a revision (a whole number from 1) or a fingerprint (sha256:…)")]
            )
        return ViewEntry(tool=name, pin=int(pin))
    return ViewEntry(tool=name)


def _strings(value: object, where: str, problems: list[tuple[str, str]]) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(
        isinstance(v, str) and 0 < len(v) <= 256 for v in value
    ):
        problems.append((where, "must be a list of non-empty strings"))
        return ()
    return tuple(value)


def _fields_and_name(
    payload: dict[str, Any], name: str | None, problems: list[tuple[str, str]]
) -> str:
    """The view's checked name (the path's, if the body names one it must agree); a field
    that is not a view's is a problem too."""
    for key in payload:
        if key not in FIELDS and key not in ("revision", "updated_at", "updated_by"):
            problems.append((str(key)[:64], "is not a field of a view"))
    given = payload.get("name", name)
    if name is not None and given != name:
        problems.append(("name", f"the body names {given!r} but the path names {name!r}"))
    try:
        return check_view_name(given)
    except ViewRuleError as error:
        problems.extend(error.problems)
        return ""


def check_view(payload: object, *, name: str | None = None) -> View:
    """A checked View from its JSON definition; ViewRuleError lists every problem."""
    if not isinstance(payload, dict):
        raise ViewRuleError([("body", "must be a JSON object")])
    problems: list[tuple[str, str]] = []
    view_name = _fields_and_name(payload, name, problems)
    entries = _entries(payload.get("tools"), problems)
    description = payload.get("description", "")
    if not isinstance(description, str) or len(description) > MAX_DESCRIPTION:
        problems.append(("description", f"must be text of at most {MAX_DESCRIPTION} characters"))
    flags = {}
    for flag in ("published", "anonymous"):
        value = payload.get(flag, False)
        if not isinstance(value, bool):
            problems.append((flag, "must be true or false"))
        flags[flag] = value is True
    try:
        quota = check_quota(payload.get("quota"))
    except QuotaRuleError as error:
        field_name, _, message = str(error).partition(": ")
        problems.append((field_name, message))
        quota = NO_QUOTA
    scopes = _strings(payload.get("oauth_scopes"), "oauth_scopes", problems)
    clients = _strings(payload.get("oauth_clients"), "oauth_clients", problems)
    confirm = _confirm(payload.get("confirm"), problems)
    try:
        approvers = check_approvers(payload.get("approvers"), payload.get("confirm"))
    except ApproversRuleError as error:
        field_name, _, message = str(error).partition(": ")
        problems.append((field_name, message))
        approvers = ()
    mode = payload.get("mode", "list")
    if mode not in MODES:
        problems.append(
            (
                "mode",
                'must be "list" (tools/list shows every tool), "search" (it shows '
                "search_tools, describe_tools and call_tool, for views of many tools) or "
                '"code" (search_tools, describe_tools and execute, which runs code that '
                "calls the tools)",
            )
        )
        mode = "list"
    if problems:
        raise ViewRuleError(problems)
    return View(
        name=view_name,
        entries=tuple(entries),
        description=str(description),
        published=flags["published"],
        anonymous=flags["anonymous"],
        quota=quota,
        oauth_scopes=scopes,
        oauth_clients=clients,
        confirm=confirm,
        approvers=approvers,
        mode=mode,
    )


def _entries(tools: object, problems: list[tuple[str, str]]) -> list[ViewEntry]:
    """A view's `tools` list, each entry checked; problems are added, never raised."""
    entries: list[ViewEntry] = []
    if not isinstance(tools, list) or len(tools) > MAX_ENTRIES:
        problems.append(("tools", f"must be a list of at most {MAX_ENTRIES} entries"))
        return entries
    for index, text in enumerate(tools):
        try:
            entries.append(parse_entry(text, f"tools[{index}]"))
        except ViewRuleError as error:
            problems.extend(error.problems)
    named = [e.tool for e in entries if e.tool is not None]
    twice = sorted({n for n in named if named.count(n) > 1})
    if twice:
        problems.append(("tools", f"names {twice[0]!r} twice"))
    return entries


def _confirm(confirm: object, problems: list[tuple[str, str]]) -> str | None:
    if confirm is None or confirm in CONFIRM_VALUES:
        return confirm
    problems.append(
        (
            "confirm",
            'must be "destructive" (ask the user before tools not marked '
            'destructiveHint: false) or "writes" (before tools not marked readOnlyHint: '
            "true); leave it out to never ask",
        )
    )
    return None
