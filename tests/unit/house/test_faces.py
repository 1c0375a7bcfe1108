"""Each room's `__init__.py` is its face: `__all__` names what other rooms may import from it.

As httpx pins its exported names, EXPORTS pins every room's face, so a refactor cannot
silently widen or narrow it. A name in a face is an object the package holds or one of the
room's modules. An import from another room goes through that face: `from kiln.access import
usage`, or `from kiln.accounting.gate import CallGate` where `gate` is in the face; never a name
or a module that starts with `_`. Every import is read, function-level and `TYPE_CHECKING`
ones too. (`settings`, `stack` and `lambda_handlers` sit at the package top and are no room.)
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[3] / "functions" / "kiln"

# room -> its __all__, in order (a string split on whitespace)
EXPORTS: dict[str, str] = {
    "access": (
        "approval_store approvals pins quotas resolve secrets view_files view_store views waiting "
        "webhook"
    ),
    "accounting": "account gate idempotency ledger ledger_shards ledger_totals pending usage",
    "api": "apps mcp settings",
    "connections": (
        "ConnectError Connections calls envelope exchange identity_of oauth providers service vault"
    ),
    "authoring": (
        "ArgumentsRejectedError AuthoringService FolderTarget TestRun ToolSource admin serialise "
        "service"
    ),
    "aws": "clients directory invoke items signed",
    "bundles": "build cache errors hooks identity scheduler settings store",
    "catalog": (
        "breaking changelog errors files fingerprint model names narrowing requirements rules "
        "secret_names snapshot store syntax toolfiles violations"
    ),
    "cli": "main",
    "identity": "audit callers keys metadata policy settings tokens",
    "local": "dev state",
    "observability": "plain redact telemetry",
    "protocol": (
        "CallContext CallLimits HttpRequest HttpResponse McpEndpoint ProtocolSettings ToolBackend "
        "ToolOutcome ToolView backend calling card_paths cards codestubs discovery dispatch errors "
        "guard http idempotency inner jsontext jsstubs pinning spec talking tasks wire"
    ),
    "runner": (
        "InvalidArgumentsError NodeUnavailableError RunLimits RunRequest RunResult Runner "
        "RunnerBusyError RunnerSettings afterwards ceiling contain contract contract_text doctor "
        "errors launcher limits model nodejs processes remote shield sweep talk"
    ),
    "schema": "arguments safe wording",
    "serving": "backend conversation resolved runner_function store_errors warming",
    "studio": "assets",
    "tasks": "approving service settings store worker",
}


def rooms(package: Path = PACKAGE) -> list[str]:
    return sorted(path.parent.name for path in package.glob("*/__init__.py"))


def face(room: str, package: Path = PACKAGE) -> list[str]:
    """The room's `__all__`, read from its source (no import needed)."""
    tree = ast.parse((package / room / "__init__.py").read_text("utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "__all__" for target in node.targets
        ):
            return list(ast.literal_eval(node.value))
    return []


def _module_of(path: Path, package: Path) -> str:
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def crossings(package: Path = PACKAGE) -> Iterator[tuple[str, str, str, str]]:
    """(importing module, room imported, module or package imported, name) for every import
    from another room; the name is "" for `import kiln.room.module`."""
    known = set(rooms(package))
    for path in sorted(package.rglob("*.py")):
        source = _module_of(path, package)
        here = source.split(".")[1] if source.count(".") else ""
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                targets = [(node.module, alias.name) for alias in node.names]
            elif isinstance(node, ast.Import):
                targets = [(alias.name, "") for alias in node.names]
            else:
                continue
            for module, name in targets:
                parts = module.split(".")
                if parts[0] == "kiln" and len(parts) > 1 and parts[1] in known - {here}:
                    yield source, parts[1], module, name


def behind_the_face(package: Path = PACKAGE) -> list[str]:
    faces = {room: set(face(room, package)) for room in rooms(package)}
    wrong = []
    for source, room, module, name in crossings(package):
        parts = module.split(".")
        private = [part for part in [*parts, name] if part.startswith("_")]
        door = parts[2] if len(parts) > 2 else name
        if private or (door and door not in faces[room]):
            wrong.append(f"{source} imports {module}{':' + name if name else ''}")
    return sorted(wrong)


def test_every_room_has_a_face() -> None:
    assert [room for room in rooms() if not face(room)] == []


def test_each_room_exports_exactly_the_pinned_names() -> None:
    assert {room: face(room) for room in rooms()} == {
        room: names.split() for room, names in EXPORTS.items()
    }


def test_every_exported_name_is_there() -> None:
    absent = [
        f"kiln.{room}.{name}"
        for room in rooms()
        for name in face(room)
        if not hasattr(importlib.import_module(f"kiln.{room}"), name)
        and not (PACKAGE / room / f"{name}.py").exists()
        and not (PACKAGE / room / name / "__init__.py").exists()
    ]
    assert absent == []


def test_imports_across_rooms_go_through_a_face() -> None:
    assert behind_the_face() == [], (
        "add the module to the room's __all__ (and EXPORTS) or import through the face;"
        " names starting with _ stay in their room"
    )


def test_the_check_sees_a_private_name_and_a_module_behind_the_face(tmp_path: Path) -> None:
    package = tmp_path / "kiln"
    for room in ("access", "api"):
        (package / room).mkdir(parents=True)
    (package / "access" / "__init__.py").write_text('__all__ = ["gate"]\n')
    (package / "api" / "__init__.py").write_text("")
    (package / "api" / "mcp.py").write_text(
        "from kiln.access.gate import Work, _Work\nfrom kiln.access import gate, ledger\n"
        "def f():\n    import kiln.access._shards\n"
    )
    assert behind_the_face(package) == [
        "kiln.api.mcp imports kiln.access._shards",
        "kiln.api.mcp imports kiln.access.gate:_Work",
        "kiln.api.mcp imports kiln.access:ledger",
    ]
