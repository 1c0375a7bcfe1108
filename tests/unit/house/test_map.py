"""The maintainer's map (the `kiln` package docstring) matches the tree.

Every path it names (`stack.py`, `api/apps.py`, `local/emulator/`) exists under
`functions/kiln`, and every room (a package right under `functions/kiln`) is named in the map
as `room/`, so that a new or renamed room cannot leave the map behind.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[3] / "functions" / "kiln"
# A module (`stack.py`, `api/apps.py`) or a room or folder (`api/`, `local/emulator/`).
NAMED = re.compile(r"(?<![\w./])((?:[a-z_]+/)*[a-z_]+(?:\.py|/))(?![\w/])")


def named_paths(text: str) -> set[str]:
    return set(NAMED.findall(text))


def the_map(package: Path = PACKAGE) -> str:
    docstring = ast.get_docstring(ast.parse((package / "__init__.py").read_text("utf-8")))
    assert docstring, f"{package / '__init__.py'} has no docstring: the map is missing"
    return docstring


def rooms(package: Path = PACKAGE) -> set[str]:
    return {f"{path.parent.name}/" for path in package.glob("*/__init__.py")}


def missing(package: Path = PACKAGE) -> list[str]:
    return sorted(path for path in named_paths(the_map(package)) if not (package / path).exists())


def unnamed_rooms(package: Path = PACKAGE) -> list[str]:
    return sorted(rooms(package) - named_paths(the_map(package)))


def test_every_module_and_room_the_map_names_exists() -> None:
    assert missing() == [], "the map in functions/kiln/__init__.py names paths that do not exist"


def test_every_room_is_named_in_the_map() -> None:
    assert unnamed_rooms() == [], "add these rooms to the map in functions/kiln/__init__.py"


def test_the_map_names_the_request_path_modules() -> None:
    """The map is a map, not a list of rooms only: it names the modules a request passes."""
    assert {"stack.py", "lambda_handlers.py", "settings.py", "api/apps.py"} <= named_paths(
        the_map()
    )


def test_the_checks_see_a_stale_module_and_an_unnamed_room(tmp_path: Path) -> None:
    package = tmp_path / "kiln"
    for room in ("api", "tasks"):
        (package / room).mkdir(parents=True)
        (package / room / "__init__.py").write_text("")
    (package / "api" / "apps.py").write_text("")
    (package / "__init__.py").write_text('"""The map.\n\n    app.py, api/apps.py, api/\n"""\n')
    assert missing(package) == ["app.py"]
    assert unnamed_rooms(package) == ["tasks/"]
