"""The one way a tool leaves Kiln as JSON: REST bodies, `/admin/mcp` results, `kiln tools pull`.

`tool_json` is a tool's metadata (with `code` when the reader may see source),
`revision_json` one revision, `definition` the fields an author writes (what a partial
update starts from, and what a tool folder holds).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kiln.catalog import fingerprint
from kiln.catalog.model import Draft, Revision, Tool, definition_of
from kiln.catalog.toolfiles import encode_files
from kiln.protocol.pinning import PENDING


def revision_fields(revision: Revision) -> dict[str, Any]:
    """What every revision defines, as authors submit it (secret names only, never values)."""
    return {
        "title": revision.title,
        "description": revision.description,
        "language": revision.language,
        "requirements": list(revision.requirements),
        "input_schema": revision.input_schema,
        "output_schema": revision.output_schema,
        "annotations": revision.annotations,
        "timeout_seconds": revision.timeout_seconds,
        "bundle_id": revision.bundle_id,
        "secrets": list(revision.secrets),  # names only; values are never returned
        "task": revision.task,
        "tags": list(revision.tags),
        "calls": list(revision.calls),
        "connections": [dict(need) for need in revision.connections],
    }


def tool_json(
    tool: Tool, *, code: str | None = None, files: Mapping[str, bytes] | None = None
) -> dict[str, Any]:
    """A tool's metadata and head revision; `code` (and `files`, base64) only for readers
    allowed to see source."""
    body: dict[str, Any] = {
        "id": tool.id,
        "name": tool.name,
        "enabled": tool.enabled,
        "revision": tool.head.number,
        # as MCP serves it (over what its bundle resolved to, "pending" meanwhile) when the
        # tool carries its snapshot's packages (CatalogSnapshots.packaged), else as saved
        "fingerprint": fingerprint.served_tool(tool) or PENDING,
        **revision_fields(tool.head),
        "created_at": tool.created_at,
        "updated_at": tool.updated_at,
    }
    if tool.deleted:
        body["deleted"] = True
    body.update(breaking_json(tool.head))
    if code is not None:
        body["code"] = code
        body["files"] = encode_files(files or {})
    return body


def revision_json(
    revision: Revision, *, code: str | None = None, name: str | None = None
) -> dict[str, Any]:
    """One revision; its fingerprint as the tool named `name` would serve it (without a
    name, the one it was saved with)."""
    body = {
        "revision": revision.number,
        "fingerprint": (
            fingerprint.served(name, revision) if name else revision.fingerprint or None
        ),
        **revision_fields(revision),
        "code_sha256": revision.code_sha256,
        "created_at": revision.created_at,
        "created_by": revision.created_by,
        "restored_from": revision.restored_from,
        **breaking_json(revision),
    }
    if code is not None:
        body["code"] = code
    return body


def breaking_json(revision: Revision) -> dict[str, Any]:
    """A revision saved as breaking says so, with what it breaks (kiln.catalog.breaking)."""
    if not revision.breaking:
        return {}
    return {"breaking": True, "findings": [dict(finding) for finding in revision.breaking]}


def definition(tool: Tool, code: str, files: Mapping[str, bytes] | None = None) -> dict[str, Any]:
    """The tool's head as the canonical fields of a draft (`check_draft` takes them back)."""
    fields = revision_fields(tool.head)
    del fields["bundle_id"]  # computed on save, never submitted
    body = {"name": tool.name, **fields, "code": code, "enabled": tool.enabled}
    return {**body, "files": encode_files(files or {})}


def draft_of(tool: Tool, code: str, files: Mapping[str, bytes] | None = None) -> Draft:
    """The draft that would save this tool's head again unchanged."""
    return Draft(
        **definition_of(tool.head),
        name=tool.name,
        code=code,
        enabled=tool.enabled,
        files=dict(files or {}),
    )


def etag(tool: Tool) -> str:
    """The ETag of a tool's representation: its head revision number, quoted."""
    return f'"{tool.head.number}"'
