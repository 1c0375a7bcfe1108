"""Tool folders loaded again at every `kiln dev` start, without overwriting API edits.

A record (`loaded.json` in the state directory) keeps, per tool, the digest of its folder and
the tool's revision when the folder was last loaded. At start:

- a folder as it was then is left alone, so what changed through the API since stays;
- a folder changed on disk is pushed, unless the tool also changed through the API since
  (a new revision, a rename or a delete): then the API's revision is kept and the folder is
  skipped, with a line that says so and how to take the disk version instead.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kiln.catalog.files import SyncTarget, draft_digest, push, read_folders


def load_folders(target: SyncTarget, folders: Sequence[Path], record: Path) -> list[str]:
    """Push what changed on disk only; returns one line per tool created, updated or skipped."""
    drafts = read_folders(folders)  # every problem at once, before anything is written
    loaded = _read(record)
    lines: list[str] = []
    to_push = []
    for folder, draft in zip(folders, drafts, strict=True):
        seen = _seen(loaded, draft.name)
        digest = draft_digest(draft)
        if seen.get("digest") == digest:
            continue
        current = target.current(draft.name)
        if current is not None and current[0] == draft:  # already in the catalog as on disk
            loaded[draft.name] = {"digest": digest, "revision": current[1]}
            continue
        head = None if current is None else current[1]
        if "revision" in seen and seen["revision"] != head:
            kept = f"kept revision {head}" if head is not None else "kept it deleted or renamed"
            lines.append(
                f"skipped {folder}: changed on disk and through the API since the last start; "
                f"{kept} from the API. To take the disk version: kiln tools push {folder}"
            )
            continue
        to_push.append((folder, draft, digest))
    results = push(target, [folder for folder, _, _ in to_push])
    for (_, draft, digest), result in zip(to_push, results, strict=True):
        now = target.current(draft.name)
        loaded[draft.name] = {"digest": digest, "revision": None if now is None else now[1]}
        if result.action != "unchanged":
            lines.append(f"{result.action} {draft.name}")
    _write(record, loaded)
    return lines


def _read(record: Path) -> dict[str, Any]:
    """The record; other entries (view files keep theirs here too) are kept as they are."""
    if not record.is_file():
        return {}
    raw: dict[str, Any] = json.loads(record.read_text("utf-8"))
    return raw


def _seen(loaded: dict[str, Any], name: str) -> dict[str, Any]:
    # Older records held only the digest: no revision known, so the disk wins as it used to.
    entry = loaded.get(name, {})
    return entry if isinstance(entry, dict) else {"digest": entry}


def _write(record: Path, loaded: dict[str, Any]) -> None:
    record.parent.mkdir(parents=True, exist_ok=True)
    tmp = record.with_name(record.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(loaded, handle, indent=2, sort_keys=True)
    tmp.replace(record)
