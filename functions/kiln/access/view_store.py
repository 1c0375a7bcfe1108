"""Where views are kept: one item each beside the tools, written in a transaction that bumps
the catalog version, so a view change is seen on the next request in every container, exactly
like a tool change, at no extra read.

| pk      | sk       | what                                  |
| ------- | -------- | ------------------------------------- |
| `VIEWS` | `<name>` | the view as JSON, and its `revision`   |

Beside the definition, `bindings` holds each named entry's tool id and pinned content digest
(`kiln.access.pins`): what the entry serves is that tool, whatever it is called now.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from kiln.access.views import (
    StaleViewError,
    View,
    ViewEntry,
    ViewExistsError,
    ViewNotFoundError,
    check_view,
)
from kiln.catalog.changelog import cancel_codes, commit
from kiln.catalog.store import utc_now

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient


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
