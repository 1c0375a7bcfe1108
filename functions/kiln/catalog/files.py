"""Tools as files: one folder per tool, holding `tool.json` (the manifest) and the script.

    examples/tools/add_vat/
        tool.json    {"description": ..., "language": "python", "input_schema": {...}, ...}
        main.py      the script (main.js for Node)

The folder's name is the tool's name unless the manifest sets `name`. The manifest takes the
same fields as the REST API, except `code`, which is the script file.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from kiln.catalog.model import Draft
from kiln.catalog.rules import CANONICAL_FIELDS, RuleError, Violation, check_draft

MANIFEST = "tool.json"
SCRIPTS = {"python": "main.py", "node": "main.js"}
Action = Literal["created", "updated", "unchanged"]


class FolderError(ValueError):
    """A tool folder that cannot become a tool; names the folder and what is wrong."""


def is_tool_folder(path: Path) -> bool:
    return (path / MANIFEST).is_file()


def tool_folders(root: Path) -> list[Path]:
    """`root` itself when it is a tool folder, else its tool subfolders, sorted by name."""
    if is_tool_folder(root):
        return [root]
    if not root.is_dir():
        raise FolderError(f"{root}: not a directory")
    return sorted(p for p in root.iterdir() if p.is_dir() and is_tool_folder(p))


def read_folder(folder: Path) -> Draft:
    """The checked draft a tool folder describes; FolderError names the folder and field."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text("utf-8"))
    except UnicodeDecodeError:
        raise FolderError(f"{folder / MANIFEST}: not UTF-8 text") from None
    except json.JSONDecodeError as error:
        raise FolderError(
            f"{folder / MANIFEST}: not valid JSON ({error.msg}, line {error.lineno})"
        ) from None
    if not isinstance(manifest, dict):
        raise FolderError(f"{folder / MANIFEST}: must hold a JSON object")
    if "code" in manifest:
        raise FolderError(f"{folder / MANIFEST}: code: put the script in its own file, not here")
    scripts = [name for name in SCRIPTS.values() if (folder / name).is_file()]
    if len(scripts) != 1:
        raise FolderError(
            f"{folder}: needs exactly one script, main.py (Python) or main.js (Node); "
            f"found {len(scripts)}"
        )
    language = "python" if scripts[0] == "main.py" else "node"
    payload = {"name": folder.name, "language": language, **manifest}
    try:
        payload["code"] = (folder / scripts[0]).read_text("utf-8")
    except UnicodeDecodeError:
        raise FolderError(f"{folder / scripts[0]}: not UTF-8 text") from None
    try:
        return check_draft(payload)
    except RuleError as error:
        raise FolderError(f"{folder}: {error}") from error


def draft_manifest(draft: Draft) -> dict[str, Any]:
    """The manifest that `read_folder` turns back into the same draft (without the code)."""
    data = asdict(draft)
    data.pop("code")
    data["requirements"] = list(draft.requirements)
    if draft.secrets:
        data["secrets"] = list(draft.secrets)
    else:
        data.pop("secrets")
    if draft.tags:
        data["tags"] = list(draft.tags)
    else:
        data.pop("tags")
    return {key: value for key, value in data.items() if value is not None}


def write_folder(root: Path, draft: Draft) -> Path:
    folder = root / draft.name
    folder.mkdir(parents=True, exist_ok=True)
    for script in SCRIPTS.values():
        (folder / script).unlink(missing_ok=True)
    (folder / SCRIPTS[draft.language]).write_text(draft.code, "utf-8")
    (folder / MANIFEST).write_text(json.dumps(draft_manifest(draft), indent=2) + "\n", "utf-8")
    return folder


class SyncTarget(Protocol):
    """A catalog that folders are pushed to: the authoring service (`kiln.authoring.FolderTarget`)
    or a server's REST API (`kiln.client.HttpTarget`)."""

    def current(self, name: str) -> tuple[Draft, int] | None:
        """The named tool's head as a draft, with its revision; None if there is none."""
        ...

    def create(self, draft: Draft) -> None: ...

    def update(self, draft: Draft, revision: int) -> None: ...


@dataclass(frozen=True)
class PushResult:
    name: str
    action: Action


def draft_digest(draft: Draft) -> str:
    """A fingerprint of everything a folder defines (what `unchanged_since` compares)."""
    text = json.dumps({**draft_manifest(draft), "code": draft.code}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def push(
    target: SyncTarget,
    folders: Iterable[Path],
    *,
    unchanged_since: Mapping[str, str] | None = None,
) -> list[PushResult]:
    """Create or update a tool per folder; tools whose folder did not change stay untouched.

    Every folder is read and checked before anything is written, so one bad folder means
    nothing is pushed. A folder whose digest equals `unchanged_since[name]` is skipped
    without looking at the catalog at all.
    """
    drafts = [read_folder(folder) for folder in folders]
    names = [draft.name for draft in drafts]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise FolderError(f"two folders define the same tool name: {', '.join(duplicates)}")
    results = []
    for draft in drafts:
        if unchanged_since and unchanged_since.get(draft.name) == draft_digest(draft):
            results.append(PushResult(draft.name, "unchanged"))
            continue
        existing = target.current(draft.name)
        if existing is None:
            target.create(draft)
            results.append(PushResult(draft.name, "created"))
        elif existing[0] == draft:
            results.append(PushResult(draft.name, "unchanged"))
        else:
            target.update(draft, existing[1])
            results.append(PushResult(draft.name, "updated"))
    return results


def draft_from_tool_json(body: Mapping[str, Any], code: str) -> Draft:
    """The draft behind a tool as the REST API shows it (GET /api/tools/{name})."""
    fields = {
        key: body[key] for key in CANONICAL_FIELDS if key != "code" and body.get(key) is not None
    }
    return check_draft({**fields, "code": code})


__all__ = [
    "FolderError",
    "PushResult",
    "SyncTarget",
    "Violation",
    "draft_digest",
    "draft_from_tool_json",
    "push",
    "read_folder",
    "tool_folders",
    "write_folder",
]
