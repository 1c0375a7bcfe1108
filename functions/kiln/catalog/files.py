"""Tools as files: one folder per tool, holding `tool.json` (the manifest), the script, and
any other files the script reads or imports.

    examples/tools/add_vat/
        tool.json    {"description": ..., "language": "python", "input_schema": {...}, ...}
        main.py      the script (main.js for Node)
        rates.json   shipped with the tool, written beside the script for every run

The folder's name is the tool's name: a manifest `name` that differs is an error. The
manifest takes the same fields as the REST API, except `code` (the script file) and `files`
(every other file in the folder, hidden ones, `__pycache__` and `node_modules` left out).
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
from kiln.catalog.syntax import available_node, check_parses
from kiln.catalog.toolfiles import MAX_FILE_BYTES, MAX_FILES, digest, encode_files

MANIFEST = "tool.json"
SCRIPTS = {"python": "main.py", "node": "main.js"}
SKIPPED_DIRS = frozenset({"__pycache__", "node_modules"})
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
    for field, where in (("code", "the script"), ("files", "the files themselves")):
        if field in manifest:
            raise FolderError(f"{folder / MANIFEST}: {field}: put {where} in the folder, not here")
    if "name" in manifest and manifest["name"] != folder.name:
        raise FolderError(
            f"{folder / MANIFEST}: name: says {str(manifest['name'])[:64]!r} but the folder is "
            f"{folder.name!r}; the folder's name is the tool's name (rename the folder, or "
            'remove "name" from tool.json)'
        )
    scripts = [name for name in SCRIPTS.values() if (folder / name).is_file()]
    if len(scripts) != 1:
        raise FolderError(
            f"{folder}: needs exactly one script, main.py (Python) or main.js (Node); "
            f"found {len(scripts)}"
        )
    language = "python" if scripts[0] == "main.py" else "node"
    payload = {**manifest, "name": folder.name, "language": manifest.get("language", language)}
    try:
        payload["code"] = (folder / scripts[0]).read_text("utf-8")
    except UnicodeDecodeError:
        raise FolderError(f"{folder / scripts[0]}: not UTF-8 text") from None
    payload["files"] = _extra_files(folder)
    try:
        draft = check_draft(payload)
        check_parses(draft.language, draft.code, available_node())
    except RuleError as error:
        raise FolderError(f"{folder}: {error}") from error
    return draft


def _extra_files(folder: Path) -> dict[str, bytes]:
    """Every file in the folder but the manifest and script, by relative path."""
    found: dict[str, bytes] = {}
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder)
        if any(part.startswith(".") or part in SKIPPED_DIRS for part in relative.parts):
            continue
        name = relative.as_posix()
        if path.is_symlink():
            raise FolderError(f"{path}: a symbolic link; copy the file into the folder instead")
        if not path.is_file() or name in (MANIFEST, *SCRIPTS.values()):
            continue
        if len(found) >= MAX_FILES:
            raise FolderError(f"{folder}: more than {MAX_FILES} files; a tool ships at most that")
        if path.stat().st_size > MAX_FILE_BYTES:
            raise FolderError(
                f"{path}: {path.stat().st_size // 1024} KiB; a tool's file must be at most "
                f"{MAX_FILE_BYTES // 1024} KiB"
            )
        found[name] = path.read_bytes()
    return found


def read_folders(folders: Iterable[Path]) -> list[Draft]:
    """Every folder's draft; FolderError lists every folder's problem at once."""
    drafts: list[Draft] = []
    problems: list[str] = []
    for folder in folders:
        try:
            drafts.append(read_folder(folder))
        except FolderError as error:
            problems.append(str(error))
    names = [draft.name for draft in drafts]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        problems.append(f"two folders define the same tool name: {', '.join(duplicates)}")
    if problems:
        count = f"{len(problems)} problem{'s' if len(problems) > 1 else ''}"
        raise FolderError(f"{count}, nothing was written:\n  " + "\n  ".join(problems))
    return drafts


def draft_manifest(draft: Draft) -> dict[str, Any]:
    """The `tool.json` that `read_folder` turns back into the same draft (with the folder)."""
    data = asdict(draft)
    for field in ("name", "code", "files"):
        data.pop(field)
    data["requirements"] = list(draft.requirements)
    if draft.secrets:
        data["secrets"] = list(draft.secrets)
    else:
        data.pop("secrets")
    for listed in ("tags", "calls", "connections"):  # left out when empty, as authors write them
        if getattr(draft, listed):
            data[listed] = list(getattr(draft, listed))
        else:
            data.pop(listed)
    return {key: value for key, value in data.items() if value is not None}


def draft_payload(draft: Draft) -> dict[str, Any]:
    """The REST API's form of the draft (POST / PUT /api/tools)."""
    payload = {"name": draft.name, **draft_manifest(draft), "code": draft.code}
    if draft.files:
        payload["files"] = encode_files(draft.files)
    return payload


def write_folder(root: Path, draft: Draft) -> Path:
    folder = root / draft.name
    folder.mkdir(parents=True, exist_ok=True)
    for script in SCRIPTS.values():
        (folder / script).unlink(missing_ok=True)
    (folder / SCRIPTS[draft.language]).write_text(draft.code, "utf-8")
    (folder / MANIFEST).write_text(json.dumps(draft_manifest(draft), indent=2) + "\n", "utf-8")
    for relative, data in draft.files.items():
        path = folder / relative  # paths were checked on save: relative, no '..'
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return folder


class SyncTarget(Protocol):
    """A catalog that folders are pushed to: the authoring service (`kiln.authoring.FolderTarget`)
    or a server's REST API (`kiln.cli.client.HttpTarget`)."""

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
    files = {path: digest(data) for path, data in draft.files.items()}
    text = json.dumps({**draft_manifest(draft), "code": draft.code, "files": files}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def push(
    target: SyncTarget,
    folders: Iterable[Path],
    *,
    unchanged_since: Mapping[str, str] | None = None,
) -> list[PushResult]:
    """Create or update a tool per folder; tools whose folder did not change stay untouched.

    Every folder is read and checked before anything is written, and every problem is
    reported at once: one bad folder means nothing is pushed. A folder whose digest equals
    `unchanged_since[name]` is skipped without looking at the catalog at all.
    """
    drafts = read_folders(folders)
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
    """The draft behind a tool as the REST API shows it (GET /api/tools/{name}, with files)."""
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
    "draft_payload",
    "push",
    "read_folder",
    "read_folders",
    "tool_folders",
    "write_folder",
]
