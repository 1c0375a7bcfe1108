"""The catalog in DynamoDB (metadata, revisions) and S3 (code). boto3 clients are passed in.

Items in the single table (string keys `pk`, `sk`):

| pk                  | sk            | what                                                  |
| ------------------- | ------------- | ----------------------------------------------------- |
| `CATALOG`           | `VERSION`     | `version`: stepped by every write, in the same transaction |
| `CATALOG#CHANGES`   | `<version>`   | the tools that version changed (catalog/changelog.py) |
| `TOOLS`             | `<tool id>`   | a tool's state and a copy of its head revision        |
| `TOOL#<tool id>`    | `REV#<n:08d>` | one immutable revision                                |
| `NAME#<lower name>` | `NAME`        | the claim that makes a name unique (case-insensitively) |

Every write is one DynamoDB transaction whose conditions make it all-or-nothing: a taken
name, a stale revision or a concurrent change cancels it and nothing is written. Code goes
to S3 first under a content address (`code/<sha256>.<ext>`), so a cancelled write leaves at
most an unreferenced object and never a half-written tool.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import KW_ONLY, asdict, dataclass, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

from botocore.exceptions import ClientError

from kiln.catalog import fingerprint
from kiln.catalog.changelog import Changes, cancel_codes, changed_since, commit, read_version
from kiln.catalog.errors import (
    NameMismatchError,
    NameTakenError,
    NotDeletedError,
    RevisionNotFoundError,
    RevisionRequiredError,
    StaleRevisionError,
    ToolNotFoundError,
)
from kiln.catalog.model import Draft, Revision, Tool, definition_of
from kiln.catalog.names import NAME_PATTERN, taken_by
from kiln.catalog.packages import read_packages
from kiln.catalog.toolfiles import digest as content_digest
from kiln.catalog.toolfiles import same_definition, same_revision

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_s3 import S3Client

log = logging.getLogger("kiln.catalog")
MAX_REVISION = 99_999_999  # revision sort keys are REV#<8 digits>
CODE_EXTENSIONS = {"python": "py", "node": "js"}
_TOOL_ID = re.compile(r"[A-Za-z0-9_.-]{1,128}")


def _shown(ref: str) -> str:
    """A caller's reference for a message: quoted, ASCII, at most 64 characters."""
    return ascii(ref if len(ref) <= 64 else ref[:64] + "…")


def tool_not_found(ref: str) -> ToolNotFoundError:
    """The refusal of a reference (a name, or `id:<id>`) that names no tool."""
    if ref.startswith("id:"):
        return ToolNotFoundError(f"no tool has the id {_shown(ref[3:])}")
    return ToolNotFoundError(f"no tool is named {_shown(ref)}")


class BundleHook(Protocol):
    """Names a revision's bundle. Starting its build is the authoring service's job, after
    the write commits."""

    def identify(self, language: str, requirements: tuple[str, ...]) -> str | None:
        """The bundle id for these requirements (no side effects); None when none is needed."""
        ...


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _s(value: str) -> dict[str, str]:
    return {"S": value}


def revision_to_json(revision: Revision) -> str:
    # Not sorted: a schema's properties keep the author's order (forms follow it).
    return json.dumps(asdict(revision), separators=(",", ":"))


def revision_from_json(text: str) -> Revision:
    data = json.loads(text)
    data["requirements"] = tuple(data["requirements"])
    data["secrets"] = tuple(data.get("secrets", ()))
    data["files"] = dict(data.get("files") or {})
    data["tags"] = tuple(data.get("tags", ()))
    data["calls"] = tuple(data.get("calls", ()))
    data["breaking"] = tuple(data.get("breaking", ()))
    data["connections"] = tuple(data.get("connections", ()))
    return Revision(**data)


def _tool_from_item(item: Mapping[str, Any]) -> Tool:
    return Tool(
        id=item["sk"]["S"],
        name=item["name"]["S"],
        enabled=item["enabled"]["BOOL"],
        head=revision_from_json(item["head"]["S"]),
        created_at=item["created_at"]["S"],
        updated_at=item["updated_at"]["S"],
        deleted=item.get("deleted", {"BOOL": False})["BOOL"],
    )


@dataclass(eq=False)
class CatalogStore:
    ddb: DynamoDBClient
    s3: S3Client
    _: KW_ONLY
    table: str
    bucket: str
    bundles: BundleHook | None = None
    clock: Callable[[], str] = utc_now

    # -- reads -------------------------------------------------------------------------

    def catalog_version(self) -> int:
        """The catalog's version number: one strongly consistent read."""
        return read_version(self.ddb, self.table)

    def changed_since(self, have: int, now: int) -> Changes | None:
        """The ids of the tools and bundles versions have+1..now changed; None: read them all."""
        return changed_since(self.ddb, self.table, have, now)

    def packages(self, bundle_ids: Iterable[str]) -> dict[str, str | None]:
        """What these bundles resolved to (catalog/packages.py): one read per 100."""
        return read_packages(self.ddb, self.table, bundle_ids)

    def tool_by_id(self, tool_id: str) -> Tool | None:
        """A tool's item (deleted ones too), by id: one strongly consistent read."""
        return self._get_by_id(tool_id)

    def list_tools(self, *, include_deleted: bool = False) -> list[Tool]:
        tools = [_tool_from_item(item) for item in self._query("TOOLS")]
        return [tool for tool in tools if include_deleted or not tool.deleted]

    def get(self, ref: str) -> Tool:
        """A live tool by exact name, or any tool (deleted too) by `id:<tool id>`."""
        if ref.startswith("id:"):
            # Only well-formed ids reach the store: an empty or 3 KB key is a store error.
            tool = self._get_by_id(ref[3:]) if _TOOL_ID.fullmatch(ref[3:]) else None
            if tool is None:
                raise tool_not_found(ref)
            return tool
        if NAME_PATTERN.fullmatch(ref) is None:
            raise tool_not_found(ref)
        key = {"pk": _s(f"NAME#{ref.lower()}"), "sk": _s("NAME")}
        claim = self.ddb.get_item(TableName=self.table, Key=key, ConsistentRead=True).get("Item")
        tool = self._get_by_id(claim["tool_id"]["S"]) if claim else None
        if tool is None or tool.deleted or tool.name != ref:
            raise tool_not_found(ref)
        return tool

    def revisions(self, ref: str) -> list[Revision]:
        tool = self.get(ref)
        return [revision_from_json(item["rev"]["S"]) for item in self._query(f"TOOL#{tool.id}")]

    def revision(self, ref: str, number: int) -> Revision:
        tool = self.get(ref)
        if not 1 <= number <= MAX_REVISION:
            raise RevisionNotFoundError(f"tool {tool.name!r} has no revision {number}")
        item = self.ddb.get_item(
            TableName=self.table,
            Key={"pk": _s(f"TOOL#{tool.id}"), "sk": _s(f"REV#{number:08d}")},
            ConsistentRead=True,
        ).get("Item")
        if item is None:
            raise RevisionNotFoundError(f"tool {tool.name!r} has no revision {number}")
        return revision_from_json(item["rev"]["S"])

    def code(self, revision: Revision) -> str:
        body = self.s3.get_object(Bucket=self.bucket, Key=revision.code_key)["Body"].read()
        return str(body.decode("utf-8"))

    def file(self, sha256: str) -> bytes:
        """One of a tool's files, by its content address."""
        return bytes(self.s3.get_object(Bucket=self.bucket, Key=f"files/{sha256}")["Body"].read())

    def files(self, revision: Revision) -> dict[str, bytes]:
        """The files the revision ships beside its script: relative path -> bytes."""
        return {path: self.file(sha) for path, sha in revision.files.items()}

    def _live(self, ref: str) -> Tool:
        """Like `get`, but a deleted tool (reachable by id) cannot be changed."""
        tool = self.get(ref)
        if tool.deleted:
            raise ToolNotFoundError(f"tool {tool.name!r} was deleted; its history is read-only")
        return tool

    # -- writes ------------------------------------------------------------------------

    def create(self, draft: Draft, *, actor: str = "") -> Tool:
        """Create a tool; refused with NameTakenError if the name is in use (no race)."""
        now = self.clock()
        tool_id = uuid.uuid4().hex
        revision = self._new_revision(tool_id, 1, draft, actor=actor, now=now)
        tool = Tool(tool_id, draft.name, draft.enabled, revision, now, now)
        try:
            self._transact(
                [
                    self._put_name(draft.name, tool_id),
                    {
                        "Put": {
                            "TableName": self.table,
                            "Item": self._tool_item(tool),
                            "ConditionExpression": "attribute_not_exists(pk)",
                        }
                    },
                    self._put_revision(revision),
                ]
            )
        except ClientError as error:
            if cancel_codes(error)[:1] == ["ConditionalCheckFailed"]:
                raise self._name_taken(draft.name) from None
            raise
        return tool

    def update(
        self,
        ref: str,
        draft: Draft,
        *,
        expected_revision: int | None,
        actor: str = "",
        breaking: tuple[Mapping[str, Any], ...] = (),
    ) -> Tool:
        """Add a revision; `expected_revision` is the head the author read (If-Match)."""
        if expected_revision is None:
            raise RevisionRequiredError(
                "If-Match: required; send the revision you read (its ETag) so that a change "
                "made in the meantime is not overwritten"
            )
        current = self._live(ref)
        if draft.name != current.name:
            raise NameMismatchError(
                f"name: the body names {draft.name!r} but the path names {current.name!r}; "
                f"rename with POST /api/tools/{current.name}/rename"
            )
        self._check_head(current, expected_revision)
        if same_definition(current, draft):
            return current  # saving what is already there makes no new revision
        revision = self._new_revision(
            current.id, expected_revision + 1, draft, actor=actor, now=self.clock()
        )
        revision = replace(revision, breaking=breaking)  # what it breaks, when said so
        return self._commit_revision(current, revision, enabled=draft.enabled)

    def restore(
        self,
        ref: str,
        number: int,
        *,
        expected_revision: int | None,
        actor: str = "",
        breaking: tuple[Mapping[str, Any], ...] = (),
    ) -> Tool:
        """Make a new head revision that copies revision `number`."""
        if expected_revision is None:
            raise RevisionRequiredError("If-Match: required; send the revision you read (its ETag)")
        current = self._live(ref)
        old = self.revision(ref, number)
        self._check_head(current, expected_revision)
        if same_revision(old, current.head):
            return current  # restoring what is already the head makes no new revision
        revision = replace(old, number=expected_revision + 1, created_at=self.clock(),
                           created_by=actor, restored_from=number, breaking=breaking)  # fmt: skip
        revision = fingerprint.sealed(current.name, revision)
        return self._commit_revision(current, revision, enabled=current.enabled)

    def set_enabled(self, ref: str, enabled: bool, *, actor: str = "") -> Tool:
        tool = self.get(ref)
        now = self.clock()
        self._transact(
            [
                {
                    "Update": {
                        "TableName": self.table,
                        "Key": {"pk": _s("TOOLS"), "sk": _s(tool.id)},
                        "UpdateExpression": "SET enabled = :e, updated_at = :now",
                        "ConditionExpression": "#n = :name AND deleted = :false",
                        "ExpressionAttributeNames": {"#n": "name"},
                        "ExpressionAttributeValues": {
                            ":e": {"BOOL": enabled},
                            ":now": _s(now),
                            ":name": _s(tool.name),
                            ":false": {"BOOL": False},
                        },
                    }
                }
            ],
            on_conflict=lambda: ToolNotFoundError(f"tool {ref!r} changed or was deleted; retry"),
        )
        return replace(tool, enabled=enabled, updated_at=now)

    def rename(self, ref: str, new_name: str, *, actor: str = "") -> Tool:
        """Rename a tool; its id, revisions and state stay."""
        tool = self.get(ref)
        if new_name == tool.name:
            return tool
        now = self.clock()
        ops: list[dict[str, Any]] = []
        if new_name.lower() != tool.name.lower():
            ops.append(self._put_name(new_name, tool.id))
            ops.append(self._delete_name(tool))
        ops.append(
            {
                "Update": {
                    "TableName": self.table,
                    "Key": {"pk": _s("TOOLS"), "sk": _s(tool.id)},
                    "UpdateExpression": "SET #n = :new, updated_at = :now",
                    "ConditionExpression": "#n = :old AND deleted = :false",
                    "ExpressionAttributeNames": {"#n": "name"},
                    "ExpressionAttributeValues": {
                        ":new": _s(new_name),
                        ":old": _s(tool.name),
                        ":now": _s(now),
                        ":false": {"BOOL": False},
                    },
                }
            }
        )
        try:
            self._transact(ops)
        except ClientError as error:
            codes = cancel_codes(error)
            if len(ops) == 3 and codes[:1] == ["ConditionalCheckFailed"]:
                raise self._name_taken(new_name) from None
            if "ConditionalCheckFailed" in codes:
                raise ToolNotFoundError(f"tool {ref!r} changed or was deleted; retry") from None
            raise
        return replace(tool, name=new_name, updated_at=now)

    def delete(self, ref: str, *, actor: str = "") -> Tool:
        """Delete a tool: its name is freed, its history stays readable by id."""
        tool = self.get(ref)
        now = self.clock()
        self._transact(
            [
                self._delete_name(tool),
                self._set_deleted(tool.id, True, now),
            ],
            on_conflict=lambda: ToolNotFoundError(f"tool {ref!r} changed or was deleted; retry"),
        )
        return replace(tool, deleted=True, enabled=False, updated_at=now)

    def undelete(self, ref: str, *, actor: str = "") -> Tool:
        """Bring a deleted tool (`id:<id>`) back under its name, if no live tool took it since."""
        tool = self.get(ref)
        if not tool.deleted:
            raise NotDeletedError(f"tool {tool.name!r} is not deleted; there is nothing to restore")
        now = self.clock()
        back = [self._put_name(tool.name, tool.id), self._set_deleted(tool.id, False, now)]
        try:
            self._transact(back)
        except ClientError as error:
            codes = cancel_codes(error)
            if codes[:1] == ["ConditionalCheckFailed"]:
                taken = f"name: a live tool is now named {tool.name!r}; rename or delete it first"
                raise NameTakenError(f"{taken}, then restore this one") from None
            if "ConditionalCheckFailed" in codes:
                raise NotDeletedError(f"tool {tool.name!r} was restored already") from None
            raise
        return replace(tool, deleted=False, enabled=True, updated_at=now)

    # -- internals ---------------------------------------------------------------------

    def _set_deleted(self, tool_id: str, deleted: bool, now: str) -> dict[str, Any]:
        """The update that marks a live tool deleted and disabled, or a deleted one live again."""
        gone = "SET deleted = :yes, enabled = :no, updated_at = :now, deleted_at = :now"
        back = "SET deleted = :no, enabled = :yes, updated_at = :now REMOVE deleted_at"
        return {
            "Update": {
                "TableName": self.table,
                "Key": {"pk": _s("TOOLS"), "sk": _s(tool_id)},
                "UpdateExpression": gone if deleted else back,
                "ConditionExpression": "deleted = :no" if deleted else "deleted = :yes",
                "ExpressionAttributeValues": {
                    ":yes": {"BOOL": True},
                    ":no": {"BOOL": False},
                    ":now": _s(now),
                },
            }
        }

    def _new_revision(
        self, tool_id: str, number: int, draft: Draft, *, actor: str, now: str
    ) -> Revision:
        code = draft.code.encode("utf-8")
        digest = hashlib.sha256(code).hexdigest()
        key = f"code/{digest}.{CODE_EXTENSIONS[draft.language]}"
        self.s3.put_object(
            Bucket=self.bucket,
            Key=key,
            Body=code,
            ContentType="text/plain; charset=utf-8",
            ChecksumAlgorithm="SHA256",
        )
        files = {path: content_digest(data) for path, data in sorted(draft.files.items())}
        for path, data in draft.files.items():  # content-addressed, like the code
            at = f"files/{files[path]}"
            self.s3.put_object(Bucket=self.bucket, Key=at, Body=data, ChecksumAlgorithm="SHA256")
        bundle_id = (
            self.bundles.identify(draft.language, draft.requirements)
            if self.bundles is not None and draft.requirements
            else None
        )
        revision = Revision(
            **definition_of(draft),
            tool_id=tool_id,
            number=number,
            code_key=key,
            code_sha256=digest,
            bundle_id=bundle_id,
            created_at=now,
            created_by=actor,
            files=files,
        )
        return fingerprint.sealed(draft.name, revision)

    def _check_head(self, tool: Tool, expected: int) -> None:
        if tool.head.number != expected:
            raise StaleRevisionError(
                f"If-Match: revision {expected} is not the current one "
                f"(revision {tool.head.number} is); read the tool again and reapply your change",
                current=tool.head.number,
            )

    def _commit_revision(self, tool: Tool, revision: Revision, *, enabled: bool) -> Tool:
        now = revision.created_at
        try:
            self._transact(
                [
                    self._put_revision(revision),
                    {
                        "Update": {
                            "TableName": self.table,
                            "Key": {"pk": _s("TOOLS"), "sk": _s(tool.id)},
                            "UpdateExpression": "SET head = :head, head_number = :n, "
                            "enabled = :e, updated_at = :now",
                            "ConditionExpression": "head_number = :expected AND deleted = :false",
                            "ExpressionAttributeValues": {
                                ":head": _s(revision_to_json(revision)),
                                ":n": {"N": str(revision.number)},
                                ":expected": {"N": str(revision.number - 1)},
                                ":e": {"BOOL": enabled},
                                ":now": _s(now),
                                ":false": {"BOOL": False},
                            },
                        }
                    },
                ]
            )
        except ClientError as error:
            if "ConditionalCheckFailed" in cancel_codes(error):
                latest = self._get_by_id(tool.id)
                current = latest.head.number if latest else tool.head.number
                raise StaleRevisionError(
                    f"If-Match: revision {revision.number - 1} is not the current one "
                    f"(another write came first; revision {current} is current); "
                    "read the tool again and reapply your change",
                    current=current,
                ) from None
            raise
        return replace(tool, head=revision, enabled=enabled, updated_at=now)

    def _tool_item(self, tool: Tool) -> dict[str, Any]:
        return {
            "pk": _s("TOOLS"),
            "sk": _s(tool.id),
            "name": _s(tool.name),
            "enabled": {"BOOL": tool.enabled},
            "deleted": {"BOOL": tool.deleted},
            "head": _s(revision_to_json(tool.head)),
            "head_number": {"N": str(tool.head.number)},
            "created_at": _s(tool.created_at),
            "updated_at": _s(tool.updated_at),
        }

    def _put_revision(self, revision: Revision) -> dict[str, Any]:
        return {
            "Put": {
                "TableName": self.table,
                "Item": {
                    "pk": _s(f"TOOL#{revision.tool_id}"),
                    "sk": _s(f"REV#{revision.number:08d}"),
                    "rev": _s(revision_to_json(revision)),
                },
                "ConditionExpression": "attribute_not_exists(pk)",
            }
        }

    def _name_taken(self, name: str) -> NameTakenError:
        key = {"pk": _s(f"NAME#{name.lower()}"), "sk": _s("NAME")}
        claim = self.ddb.get_item(TableName=self.table, Key=key, ConsistentRead=True)
        return NameTakenError(taken_by(name, claim.get("Item", {}).get("name", {}).get("S", name)))

    def _put_name(self, name: str, tool_id: str) -> dict[str, Any]:
        return {
            "Put": {
                "TableName": self.table,
                "Item": {
                    "pk": _s(f"NAME#{name.lower()}"),
                    "sk": _s("NAME"),
                    "tool_id": _s(tool_id),
                    "name": _s(name),
                },
                "ConditionExpression": "attribute_not_exists(pk)",
            }
        }

    def _delete_name(self, tool: Tool) -> dict[str, Any]:
        return {
            "Delete": {
                "TableName": self.table,
                "Key": {"pk": _s(f"NAME#{tool.name.lower()}"), "sk": _s("NAME")},
                "ConditionExpression": "tool_id = :id",
                "ExpressionAttributeValues": {":id": _s(tool.id)},
            }
        }

    def _transact(
        self,
        operations: list[dict[str, Any]],
        *,
        on_conflict: Callable[[], Exception] | None = None,
    ) -> None:
        """Commit `operations` (changelog.commit); `on_conflict` is raised instead of a
        refusal by their own conditions."""
        try:
            commit(self.ddb, self.table, operations)
        except ClientError as error:
            is_conflict = error.response["Error"]["Code"] == "TransactionCanceledException"
            if on_conflict is not None and is_conflict:
                raise on_conflict() from None
            raise

    def _get_by_id(self, tool_id: str) -> Tool | None:
        key = {"pk": _s("TOOLS"), "sk": _s(tool_id)}
        item = self.ddb.get_item(TableName=self.table, Key=key, ConsistentRead=True).get("Item")
        return _tool_from_item(item) if item else None

    def _query(self, pk: str) -> Iterator[dict[str, Any]]:
        paginator = self.ddb.get_paginator("query")
        for page in paginator.paginate(
            TableName=self.table,
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": _s(pk)},
            ConsistentRead=True,
        ):
            yield from page["Items"]
