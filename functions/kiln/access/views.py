"""Views: named, versioned sets of tools, by name and/or tag, optionally pinned to a revision.

A view is catalog data: its item lives beside the tools and every write bumps the catalog
version in the same transaction, so a view change is seen on the next request in every
container, exactly like a tool change, at no extra read.

| pk      | sk       | what                                  |
| ------- | -------- | ------------------------------------- |
| `VIEWS` | `<name>` | the view as JSON, and its `revision`   |

Beside the definition, `bindings` holds each named entry's tool id and pinned content digest
(`kiln.access.pins`): what the entry serves is that tool, whatever it is called now.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

from botocore.exceptions import ClientError

from kiln.access.approvals import CONFIRM_VALUES
from kiln.access.quotas import NO_QUOTA, Quota, QuotaRuleError, check_quota
from kiln.access.waiting import ApproversRuleError, check_approvers
from kiln.catalog.changelog import cancel_codes, commit
from kiln.catalog.fingerprint import RULE as FINGERPRINT_RULE
from kiln.catalog.fingerprint import is_fingerprint
from kiln.catalog.names import TAG_RULE, is_tag
from kiln.catalog.store import utc_now

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

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


class ViewError(Exception):
    """Base of the view refusals; the REST layer maps each to one status."""


class ViewRuleError(ViewError):
    """A view definition that breaks a rule; `problems` lists `(field, message)` pairs."""

    def __init__(self, problems: Sequence[tuple[str, str]]) -> None:
        self.problems = tuple(problems)
        super().__init__("; ".join(f"{f}: {m}" for f, m in self.problems))


class ViewNotFoundError(ViewError):
    pass


class ViewExistsError(ViewError):
    pass


class StaleViewError(ViewError):
    def __init__(self, message: str, *, current: int) -> None:
        super().__init__(message)
        self.current = current


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


def _binding(entry: ViewEntry) -> dict[str, Any] | None:
    if not entry.tool_id:
        return None
    bound: dict[str, Any] = {"id": entry.tool_id, "digest": entry.digest}
    if entry.fingerprint is not None:
        bound["pin"] = entry.pin  # the revision found with that fingerprint
    return bound


def _from_item(item: Mapping[str, Any]) -> View:
    definition = json.loads(item["view"]["S"])
    view = check_view(definition)
    bindings = json.loads(item.get("bindings", {}).get("S", "[]"))
    if len(bindings) == len(view.entries):
        entries = tuple(
            replace(e, tool_id=b.get("id"), digest=b.get("digest"), pin=b.get("pin", e.pin))
            if b
            else e
            for e, b in zip(view.entries, bindings, strict=True)
        )
        view = replace(view, entries=entries)
    updated_at = str(item.get("updated_at", {}).get("S", ""))
    return replace(
        view,
        revision=int(item["revision"]["N"]),
        updated_at=updated_at,
        updated_by=str(item.get("updated_by", {}).get("S", "")),
        since=str(item.get("since", {}).get("S", updated_at)),  # made before holds: updated_at
        accepted=json.loads(item.get("accepted", {}).get("S", "{}")),
    )


class ViewStore:
    """Views in the catalog table; every write bumps the catalog version (same transaction)."""

    def __init__(
        self,
        dynamodb: DynamoDBClient,
        *,
        table: str,
        clock: Callable[[], str] = utc_now,
        binder: Callable[[ViewEntry], ViewEntry] | None = None,
    ) -> None:
        self._db = dynamodb
        self._table = table
        self._now = clock
        self._bind = binder  # binds a named entry to its tool (kiln.access.pins)

    def list(self) -> list[View]:
        views: list[View] = []
        pages = self._db.get_paginator("query").paginate(
            TableName=self._table,
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": {"S": "VIEWS"}},
            ConsistentRead=True,
        )
        for page in pages:
            views.extend(_from_item(item) for item in page["Items"])
        return views

    def get(self, name: str) -> View:
        item = self._db.get_item(
            TableName=self._table,
            Key={"pk": {"S": "VIEWS"}, "sk": {"S": name}},
            ConsistentRead=True,
        ).get("Item")
        if item is None:
            raise ViewNotFoundError(f"no view is named {name!r}")
        return _from_item(item)

    def put(self, view: View, *, expected_revision: int | None, actor: str = "") -> View:
        """Create (`expected_revision` 0 or None when the view is new) or replace a view.

        Replacing needs the revision the author read; a stale one raises StaleViewError.
        """
        existing = None
        if expected_revision:
            with contextlib.suppress(ViewNotFoundError):
                existing = self.get(view.name)
        saved = replace(self._bound(view, existing), updated_at=self._now(), updated_by=actor)
        if existing is not None:  # what its owner accepted stays accepted
            saved = replace(saved, since=existing.since,
                            accepted={**existing.accepted, **view.accepted})  # fmt: skip
        else:
            saved = replace(saved, since=saved.updated_at)
        if not expected_revision:
            saved = replace(saved, revision=1)
            condition, values = "attribute_not_exists(pk)", {}
        else:
            saved = replace(saved, revision=expected_revision + 1)
            condition = "#r = :expected"
            values = {":expected": {"N": str(expected_revision)}}
        item = {
            "pk": {"S": "VIEWS"},
            "sk": {"S": view.name},
            "view": {"S": json.dumps(saved.definition(), sort_keys=True)},
            "revision": {"N": str(saved.revision)},
            "bindings": {"S": json.dumps([_binding(e) for e in saved.entries])},
            "updated_at": {"S": saved.updated_at},
            "updated_by": {"S": actor},
            "since": {"S": saved.since},
            "accepted": {"S": json.dumps(dict(saved.accepted), sort_keys=True)},
        }
        put: dict[str, Any] = {
            "TableName": self._table,
            "Item": item,
            "ConditionExpression": condition,
        }
        if values:
            put["ExpressionAttributeValues"] = values
            put["ExpressionAttributeNames"] = {"#r": "revision"}
        if not self._transact({"Put": put}):
            self._refuse(view.name, expected_revision)
        return saved

    def accept(self, name: str, tool_id: str, number: int, *, actor: str = "") -> View:
        """The view serves `tool_id`'s breaking revisions up to `number` (kiln.access.holds)."""
        view = self.get(name)
        accepted = {**view.accepted, tool_id: max(number, view.accepted.get(tool_id, 0))}
        return self.put(replace(view, accepted=accepted), expected_revision=view.revision,
                        actor=actor)  # fmt: skip

    def _bound(self, view: View, existing: View | None) -> View:
        """Entries kept as the stored view bound them; the others bound to today's tools.

        An entry the author did not change keeps its tool, even if another now has its name.
        """
        if self._bind is None:
            return view
        kept: dict[str, ViewEntry] = {}
        if existing is not None:
            kept = {str(e): e for e in existing.entries if e.tool_id}
        entries = tuple(
            e if e.tool is None or e.tool_id else kept.get(str(e)) or self._bind(e)
            for e in view.entries
        )
        return replace(view, entries=entries)

    def carry_rename(self, tool_id: str, old: str, new: str) -> Sequence[str]:
        """Views naming the renamed tool now name it by its new name; returns their names.

        Entries bound to the tool follow it anyway; unbound ones naming `old` are bound now.
        """
        carried = []
        for view in self.list():
            entries = tuple(
                replace(e, tool=new, tool_id=tool_id)
                if e.tool is not None
                and (e.tool_id == tool_id or (e.tool_id is None and e.tool == old))
                else e
                for e in view.entries
                if not (e.tool == new and e.tool_id != tool_id)  # a name it has now taken
            )
            if entries != view.entries:
                with contextlib.suppress(StaleViewError, ViewNotFoundError):  # changed meanwhile
                    self.put(replace(view, entries=entries), expected_revision=view.revision,
                             actor="rename")  # fmt: skip
                    carried.append(view.name)
        return carried

    def delete(self, name: str) -> View:
        view = self.get(name)
        gone = self._transact(
            {
                "Delete": {
                    "TableName": self._table,
                    "Key": {"pk": {"S": "VIEWS"}, "sk": {"S": name}},
                    "ConditionExpression": "attribute_exists(pk)",
                }
            }
        )
        if not gone:
            raise ViewNotFoundError(f"no view is named {name!r}")
        return view

    def _refuse(self, name: str, expected: int | None) -> None:
        try:
            current = self.get(name).revision
        except ViewNotFoundError:
            raise ViewNotFoundError(
                f"no view is named {name!r}; create it without If-Match"
            ) from None
        if not expected:
            raise ViewExistsError(
                f"name: a view named {name!r} already exists; replace it with If-Match"
            )
        raise StaleViewError(
            f"If-Match: revision {expected} is not the current one (revision {current} is); "
            "read the view again and reapply your change",
            current=current,
        )

    def _transact(self, operation: dict[str, Any]) -> bool:
        """Run one write with the catalog version bump; False when its condition failed
        (CatalogBusyError when other writes kept taking the version: changelog.commit)."""
        try:
            commit(self._db, self._table, [operation])
        except ClientError as error:
            if cancel_codes(error)[:1] == ["ConditionalCheckFailed"]:
                return False
            raise
        return True
