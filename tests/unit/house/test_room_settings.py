"""No room sees the whole `Settings`: each gets its own small frozen settings, built by
`kiln.settings` and passed in by `kiln.stack`.

Only the composers and entry points (`settings`, `stack`, `process`, `lambda_handlers`, `local/`,
`cli/`) may name `kiln.settings.Settings`, under `if TYPE_CHECKING:` too: a room that took a
`Settings` could read any of its fifty fields, and nobody could tell from its signature what
it depends on. A room's HTTP handlers do not reach round it either: they read
`kiln_of(request).api_settings`, never the running Kiln's `.settings`.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[3] / "functions" / "kiln"
COMPOSERS = {"settings.py", "stack.py", "process.py", "lambda_handlers.py"}
ENTRY_ROOMS = {"local", "cli"}
RUNNING_KILN = ("kiln_of(request)", "kiln", "request.app.state.kiln")


def in_a_room(path: Path, package: Path) -> bool:
    relative = path.relative_to(package)
    if len(relative.parts) == 1:
        return relative.name not in COMPOSERS
    return relative.parts[0] not in ENTRY_ROOMS


def _whole_settings(node: ast.AST) -> str | None:
    imported = node.names if isinstance(node, ast.Import | ast.ImportFrom) else []
    names = {alias.name for alias in imported}
    if isinstance(node, ast.ImportFrom) and node.module == "kiln.settings" and "Settings" in names:
        return "imports kiln.settings.Settings"
    if (isinstance(node, ast.Import) and "kiln.settings" in names) or (
        isinstance(node, ast.ImportFrom) and node.module == "kiln" and "settings" in names
    ):
        return "imports kiln.settings"
    if (
        isinstance(node, ast.Attribute)
        and node.attr == "settings"
        and ast.unparse(node.value) in RUNNING_KILN
    ):
        return f"reads {ast.unparse(node)}"
    return None


def whole_settings_uses(package: Path = PACKAGE) -> list[str]:
    """Where a room imports `kiln.settings.Settings` or reads the running Kiln's `.settings`."""
    found = []
    for path in sorted(package.rglob("*.py")):
        if not in_a_room(path, package):
            continue
        where = path.relative_to(package).as_posix()
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            what = _whole_settings(node)
            if what is not None:
                found.append(f"{where}:{getattr(node, 'lineno', 0)} {what}")
    return found


def test_no_room_takes_the_whole_settings() -> None:
    assert whole_settings_uses() == [], (
        "give the room its own frozen settings dataclass (built in kiln/settings.py, passed "
        "in by kiln/stack.py) instead"
    )


def test_every_rooms_settings_are_frozen_dataclasses() -> None:
    rooms = sorted(p.parent.name for p in PACKAGE.glob("*/settings.py"))
    assert {"api", "bundles", "identity", "protocol", "tasks"} <= set(rooms)
    for room in rooms:
        module = importlib.import_module(f"kiln.{room}.settings")
        classes = [
            value
            for value in vars(module).values()
            if dataclasses.is_dataclass(value) and value.__module__ == module.__name__
        ]
        assert classes, f"kiln/{room}/settings.py holds no settings dataclass"
        for cls in classes:
            assert cls.__dataclass_params__.frozen, f"{cls.__qualname__} is not frozen"


def test_the_check_sees_a_room_taking_the_whole_settings(tmp_path: Path) -> None:
    package = tmp_path / "kiln"
    (package / "bundles").mkdir(parents=True)
    (package / "local").mkdir()
    (package / "settings.py").write_text("class Settings: ...\n")
    (package / "stack.py").write_text("from kiln.settings import Settings\n")
    (package / "local" / "dev.py").write_text("from kiln.settings import Settings\n")
    (package / "bundles" / "hooks.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
        "    from kiln.settings import Settings, inherited_environment\n"
    )
    (package / "bundles" / "api.py").write_text(
        "def cap(request):\n    return kiln_of(request).settings.max_body_bytes\n"
    )
    assert whole_settings_uses(package) == [
        "bundles/api.py:2 reads kiln_of(request).settings",
        "bundles/hooks.py:3 imports kiln.settings.Settings",
    ]
