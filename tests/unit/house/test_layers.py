"""The rooms of `functions/kiln` and the one-way rules between them (DESIGN.md, "Rooms").

Every import is read from the source, function-level ones too (only imports under
`if TYPE_CHECKING:` are left out: they never run). The test fails on

- any import cycle between modules;
- an import against the one-way rules below;
- `protocol/` or `schema/` importing Starlette, FastAPI, boto3 or botocore;
- anything but an entry point importing `cli/` or `local/` (those are left out of Lambda).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from functools import cache
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[3] / "functions" / "kiln"

# What every room may import: `kiln` (the version) and `kiln.errors` (the one error type, which
# imports nothing of Kiln's: any room may raise a refusal that carries its own answer).
EVERYWHERE = {"kiln", "errors"}
# room -> the rooms of Kiln it may import (besides itself and EVERYWHERE)
MAY_IMPORT: dict[str, set[str]] = {
    "errors": set(),
    "runner": set(),
    "schema": set(),
    "aws": set(),
    "observability": set(),
    "protocol": {"schema"},
    "catalog": {"aws", "runner", "schema"},
    "bundles": {"aws", "catalog", "runner", "settings"},
    # A key carries a view and quotas: who is calling may name what they may spend (never
    # the other way round).
    "identity": {"access", "aws"},
    # Policy (who may call what) and accounting (what each call cost and did): the books
    # read the rules, never the other way round.
    "access": {"catalog", "schema"},
    # Each caller's OAuth connections: the vault and the flows; the edge and the call path
    # use them, they use nothing of the call path.
    "connections": {"aws"},
    "accounting": {"access", "catalog", "schema"},
    "tasks": {"access", "accounting", "aws", "catalog", "protocol", "runner", "schema", "serving"},
    "serving": {
        "access",
        "accounting",
        "aws",
        "bundles",
        "catalog",
        "protocol",
        "runner",
        "schema",
    },
    "authoring": {
        "access",
        "aws",
        "bundles",
        "catalog",
        "identity",
        "protocol",
        "runner",
        "schema",
        "serving",
    },
    "studio": set(),
    # What an entry point sets up in its process (the runner function imports no more).
    "process": {"aws", "observability", "runner", "settings"},
    "settings": {"api", "identity", "protocol", "runner", "tasks", "access", "bundles", "catalog"},
    "stack": {
        "process",
        "access",
        "accounting",
        "connections",
        "authoring",
        "aws",
        "bundles",
        "catalog",
        "identity",
        "observability",
        "protocol",
        "runner",
        "schema",
        "serving",
        "settings",
        "tasks",
    },
    "api": {
        "access",
        "accounting",
        "connections",
        "authoring",
        "aws",
        "bundles",
        "catalog",
        "identity",
        "protocol",
        "runner",
        "schema",
        "serving",
        "settings",
        "studio",
        "tasks",
    },
}
ENTRY_POINTS = {"lambda_handlers", "cli", "local"}
MAY_IMPORT["lambda_handlers"] = MAY_IMPORT["stack"] | {"api", "stack"}
MAY_IMPORT["local"] = MAY_IMPORT["api"] | {"api", "stack", "observability"}
MAY_IMPORT["cli"] = MAY_IMPORT["local"] | {"local"}
PURE = {"protocol", "schema"}
WEB_AND_AWS = ("starlette", "fastapi", "boto3", "botocore")


def module_name(path: Path, package: Path) -> str:
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def modules(package: Path = PACKAGE) -> dict[str, Path]:
    return {module_name(path, package): path for path in sorted(package.rglob("*.py"))}


def room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "kiln"


def _type_only(tree: ast.AST) -> set[int]:
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped |= {id(sub) for stmt in node.body for sub in ast.walk(stmt)}
    return skipped


def imports(path: Path, known: dict[str, Path]) -> Iterator[str]:
    """Every module `path` imports at run time (a `from m import name` of a submodule counts
    as the submodule)."""
    tree = ast.parse(path.read_text("utf-8"))
    skipped = _type_only(tree)
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            yield node.module
            for alias in node.names:
                if f"{node.module}.{alias.name}" in known:
                    yield f"{node.module}.{alias.name}"


@cache
def graph(package: Path = PACKAGE) -> dict[str, frozenset[str]]:
    known = modules(package)
    return {
        name: frozenset(i for i in imports(path, known) if i in known and i != name)
        for name, path in known.items()
    }


def _parents(module: str) -> set[str]:
    """Importing kiln.a.b runs kiln/__init__ and kiln/a/__init__ first: not an edge we judge."""
    parts = module.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts))}


def cycles(package: Path = PACKAGE) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    edges = {m: {t for t in ts if t not in _parents(m)} for m, ts in graph(package).items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in edges[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def test_there_is_no_import_cycle() -> None:
    assert cycles() == []


def test_every_room_is_named_in_the_rules() -> None:
    rooms = {room(m) for m in modules()} - {"kiln"}
    assert rooms - set(MAY_IMPORT) == set(), "a new room: add it to MAY_IMPORT (and DESIGN.md)"


def against_the_rules(package: Path = PACKAGE) -> list[str]:
    return sorted(
        f"{source} imports {target}"
        for source, targets in graph(package).items()
        for target in targets
        if room(target) not in {room(source), *EVERYWHERE}
        and room(target) not in MAY_IMPORT.get(room(source), set())
    )


def test_imports_go_one_way() -> None:
    assert against_the_rules() == []


def test_only_entry_points_import_cli_and_local() -> None:
    wrong = sorted(
        f"{source} imports {target}"
        for source, targets in graph().items()
        for target in targets
        if room(target) in {"cli", "local"} and room(source) not in ENTRY_POINTS
    )
    assert wrong == []


def test_local_never_imports_cli() -> None:
    wrong = sorted(
        f"{source} imports {target}"
        for source, targets in graph().items()
        for target in targets
        if room(source) == "local" and room(target) == "cli"
    )
    assert wrong == []


def test_protocol_and_schema_import_no_web_framework_or_aws_sdk() -> None:
    wrong = sorted(
        f"{name} imports {imported}"
        for name, path in modules().items()
        if room(name) in PURE
        for imported in imports(path, modules())
        if imported.split(".")[0] in WEB_AND_AWS
    )
    assert wrong == []


def test_the_checks_see_a_cycle_and_an_upward_import(tmp_path: Path) -> None:
    """The rules above can fail: a package with a cycle through a function-level import and
    a runner module importing the serving room is caught on both counts."""
    package = tmp_path / "kiln"
    for room_name in ("runner", "serving"):
        (package / room_name).mkdir(parents=True)
        (package / room_name / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "serving" / "a.py").write_text("from kiln.serving import b\n")
    (package / "serving" / "b.py").write_text("def f():\n    from kiln.serving.a import x\n")
    (package / "runner" / "run.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from kiln.serving import a\n"
        "def g():\n    import kiln.serving.b\n"
    )
    assert cycles(package) == [["kiln.serving.a", "kiln.serving.b"]]
    assert against_the_rules(package) == ["kiln.runner.run imports kiln.serving.b"]
