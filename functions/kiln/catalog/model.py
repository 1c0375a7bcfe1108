"""The catalog's plain data: what an author submits, and what the catalog keeps."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Literal

Language = Literal["python", "node"]
# Whether calls may run as MCP tasks (long-running, past the request): None means never.
TaskMode = Literal["optional", "required", "ask_first"]

ANNOTATION_HINTS = ("readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint")


@dataclass(frozen=True)
class Draft:
    """A checked, normalised tool definition, ready to become a revision.

    Produced only by `catalog.rules.check_draft`; every field already obeys the save rules.
    """

    name: str
    description: str
    language: Language
    code: str
    requirements: tuple[str, ...] = ()
    input_schema: Mapping[str, Any] = field(
        default_factory=lambda: {"type": "object", "properties": {}, "additionalProperties": False}
    )
    output_schema: Mapping[str, Any] | None = None
    title: str | None = None
    annotations: Mapping[str, Any] | None = None  # only keys from ANNOTATION_HINTS (+ "title")
    timeout_seconds: float = 30.0
    enabled: bool = True
    secrets: tuple[str, ...] = ()  # names of the per-tool secrets the script reads from its env
    files: Mapping[str, bytes] = field(default_factory=dict)  # relative path -> bytes
    task: TaskMode | None = None
    tags: tuple[str, ...] = ()  # short labels that views select tools by
    calls: tuple[str, ...] = ()  # the tools its script may call (runner/TALKING.md)
    # per-caller OAuth tokens it needs: {"provider", "scopes"} each (catalog/connection_needs)
    connections: tuple[Mapping[str, Any], ...] = ()


@dataclass(frozen=True)
class Revision:
    """One immutable version of a tool. Code lives in S3 under `code_key`."""

    tool_id: str
    number: int
    description: str
    language: Language
    code_key: str
    code_sha256: str
    requirements: tuple[str, ...]
    input_schema: Mapping[str, Any]
    output_schema: Mapping[str, Any] | None
    title: str | None
    annotations: Mapping[str, Any] | None
    timeout_seconds: float
    bundle_id: str | None  # None when the tool needs no packages
    created_at: str  # ISO 8601 UTC
    created_by: str = ""
    restored_from: int | None = None
    secrets: tuple[str, ...] = ()  # declared secret names (values live in SSM, never here)
    files: Mapping[str, str] = field(default_factory=dict)  # relative path -> sha256 (files/…)
    task: TaskMode | None = None
    tags: tuple[str, ...] = ()
    calls: tuple[str, ...] = ()
    connections: tuple[Mapping[str, Any], ...] = ()
    # Saved although it breaks the revision before (kiln.catalog.breaking): what it breaks.
    breaking: tuple[Mapping[str, Any], ...] = ()
    # sha256:<hex> over what it is and what runs, under the name it was saved with, saved_as
    # (catalog/fingerprint.py); both "" for a revision saved before fingerprints
    fingerprint: str = ""
    saved_as: str = ""


@dataclass(frozen=True)
class Tool:
    """A tool's identity and state, with its head revision."""

    id: str  # never changes, renames keep it
    name: str
    enabled: bool
    head: Revision
    created_at: str
    updated_at: str
    deleted: bool = False
    # As a snapshot serves it: what each bundle the snapshot knows resolved to, by bundle id
    # (catalog/packages.py; shared by the snapshot's tools), which its served fingerprint
    # takes (fingerprint.served_tool). None: read from the store, not a snapshot.
    packages: Mapping[str, str | None] | None = field(default=None, compare=False, repr=False)


# What a draft says about its tool and the revision saved from it keeps as it was said: the
# fields both hold but the files (bytes in a draft, digests in a revision, compared apart).
_KEPT = {f.name for f in fields(Revision)} - {"files"}
DEFINITION_FIELDS = tuple(f.name for f in fields(Draft) if f.name in _KEPT)


def definition_of(spec: Draft | Revision) -> dict[str, Any]:
    """The DEFINITION_FIELDS of a draft or a revision, by name."""
    return {name: getattr(spec, name) for name in DEFINITION_FIELDS}
