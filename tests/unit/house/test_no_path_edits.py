"""Benchmarks and tests import their helpers as packages, never by editing `sys.path`.

Kiln is installed into the venv (`pip install -e`); the tests' helpers are the `support`
package (pytest's `pythonpath = ["tests"]`); a benchmark runs as a module of the repository
(`python -m bench.durability.kill9` from its root) and imports `bench.<room>.<module>` and
`tests.support.<module>`. A `sys.path` edit hides which code a script runs, and breaks when
the file moves; this test fails on any under bench/ or tests/ (code a test hands to a child
process as text is not read).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PATH_CALLS = {"insert", "append", "extend", "remove", "clear", "pop"}


def _touches_sys_path(node: ast.AST) -> bool:
    return ast.unparse(node).startswith("sys.path")


def path_edits(tree: ast.AST) -> list[int]:
    """The lines of `tree` that change `sys.path` (or add a site directory)."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = ast.unparse(node.func.value)
            if (owner == "sys.path" and node.func.attr in PATH_CALLS) or (
                owner == "site" and node.func.attr == "addsitedir"
            ):
                lines.append(node.lineno)
        elif isinstance(node, ast.Assign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(_touches_sys_path(target) for target in targets):
                lines.append(node.lineno)
    return sorted(lines)


def test_no_benchmark_or_test_edits_sys_path() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{line}"
        for folder in ("bench", "tests")
        for path in sorted((ROOT / folder).rglob("*.py"))
        if "node_modules" not in path.parts
        for line in path_edits(ast.parse(path.read_text("utf-8")))
    ]
    assert found == [], (
        "import the helper as a package instead (`from tests.support.app import serve` in "
        "bench/, run as `python -m bench.<room>.<script>`)"
    )


def test_the_check_sees_every_kind_of_edit() -> None:
    code = (
        "import sys, site\n"
        "sys.path.insert(0, 'x')\n"
        "sys.path[:0] = ['a', 'b']\n"
        "sys.path += ['c']\n"
        "site.addsitedir('d')\n"
        "sys.path = ['e']\n"
        "print(sys.path, 'sys.path.insert(0, x)')\n"
    )
    assert path_edits(ast.parse(code)) == [2, 3, 4, 5, 6]
