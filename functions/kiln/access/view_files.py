"""Views as files: `<name>.view.json` beside the tool folders, pushed and pulled like tools.

    tools/
        add_vat/            a tool folder
        finance.view.json   {"tools": ["add_vat@3", "tag:finance"], "published": true}

The file's name is the view's name unless the file sets `name`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal, Protocol

from kiln.access.view_store import ViewStore
from kiln.access.views import View, ViewNotFoundError, ViewRuleError, check_view
from kiln.catalog.files import FolderError

SUFFIX = ".view.json"
Action = Literal["created", "updated", "unchanged"]


class ViewFileError(FolderError):
    """A view file that cannot become a view; names the file and what is wrong."""


def view_files(root: Path) -> list[Path]:
    """The view files directly in `root` (none when `root` is a tool folder), sorted."""
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.is_file() and p.name.endswith(SUFFIX))


def read_view_file(path: Path) -> View:
    try:
        body = json.loads(path.read_text("utf-8"))
    except UnicodeDecodeError:
        raise ViewFileError(f"{path}: not UTF-8 text") from None
    except OSError as error:
        raise ViewFileError(f"{path}: cannot be read ({error.strerror})") from None
    except json.JSONDecodeError as error:
        raise ViewFileError(f"{path}: not valid JSON ({error.msg}, line {error.lineno})") from None
    if not isinstance(body, dict):
        raise ViewFileError(f"{path}: must hold a JSON object")
    try:
        return check_view({"name": path.name.removesuffix(SUFFIX), **body})
    except ViewRuleError as error:
        raise ViewFileError(f"{path}: {error}") from None


def write_view_file(root: Path, view: View) -> Path:
    path = root / f"{view.name}{SUFFIX}"
    body = {k: v for k, v in view.definition().items() if k != "name"}
    path.write_text(json.dumps(body, indent=2) + "\n", "utf-8")
    return path


class ViewTarget(Protocol):
    def current(self, name: str) -> View | None:
        """The named view with its revision, or None."""
        ...

    def put(self, view: View, expected_revision: int | None) -> None: ...


@dataclass(frozen=True)
class ViewPushResult:
    name: str
    action: Action


def same_definition(a: View, b: View) -> bool:
    return a.definition() == b.definition()


def push_views(target: ViewTarget, files: Iterable[Path]) -> list[ViewPushResult]:
    """Create or replace a view per file; every file is checked before anything is written."""
    views = [read_view_file(path) for path in files]
    names = [view.name for view in views]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise ViewFileError(f"two view files define the same view: {', '.join(twice)}")
    results = []
    for view in views:
        existing = target.current(view.name)
        if existing is None:
            target.put(view, None)
            results.append(ViewPushResult(view.name, "created"))
        elif same_definition(existing, view):
            results.append(ViewPushResult(view.name, "unchanged"))
        else:
            target.put(view, existing.revision)
            results.append(ViewPushResult(view.name, "updated"))
    return results


class ViewStoreTarget:
    """Pushes view files straight into the table (what `kiln dev` does at start)."""

    def __init__(self, store: ViewStore, *, actor: str = "files") -> None:
        self._store = store
        self._actor = actor

    def current(self, name: str) -> View | None:
        try:
            return self._store.get(name)
        except ViewNotFoundError:
            return None

    def put(self, view: View, expected_revision: int | None) -> None:
        self._store.put(replace(view, revision=0), expected_revision=expected_revision,
                        actor=self._actor)  # fmt: skip


def view_digest(view: View) -> str:
    text = json.dumps(view.definition(), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def load_view_files(
    store: ViewStore, roots: Iterable[Path], loaded: Mapping[str, str]
) -> tuple[list[ViewPushResult], dict[str, str]]:
    """Push the view files of `roots` that changed since `loaded` (`view:<name>` -> digest):
    a view changed through the API since keeps that change while its file stays as it was.

    Returns what was done and the digests to remember."""
    files = [path for root in roots for path in view_files(root)]
    views = {path: read_view_file(path) for path in files}
    digests = {f"view:{view.name}": view_digest(view) for view in views.values()}
    changed = [path for path, view in views.items()
               if loaded.get(f"view:{view.name}") != digests[f"view:{view.name}"]]  # fmt: skip
    results = push_views(ViewStoreTarget(store, actor="kiln dev"), changed)
    return results, digests
