"""A run's timeout travels as a typed field (`RunResult.timed_out` → `ToolOutcome.timed_out` →
`Seen.outcome`), never recognised by its text. Only the runner's contract writes the
`[timeout]` text; this test fails if any code compares against it or searches for it."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[3] / "functions" / "kiln"
MARK = "[timeout"
SEARCHES = {"startswith", "endswith", "find", "rfind", "index", "count", "split", "partition"}


def sniffers(tree: ast.AST) -> list[int]:
    """Lines that test a text for the timeout mark: `MARK in x`, `x == MARK...`, x.startswith."""
    found = []
    for node in ast.walk(tree):
        marks: list[ast.expr] = []
        if isinstance(node, ast.Compare):
            marks = [node.left, *node.comparators]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in SEARCHES
        ):
            marks = list(node.args)
        if any(isinstance(m, ast.Constant) and MARK in str(m.value) for m in marks):
            found.append(node.lineno)
    return found


def test_no_code_recognises_a_timeout_by_its_text() -> None:
    found = [
        f"{path.relative_to(PACKAGE)}:{line}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for line in sniffers(ast.parse(path.read_text("utf-8")))
    ]
    assert not found, f"a timeout recognised by the text {MARK!r}, not RunResult.timed_out: {found}"


def test_the_check_finds_the_old_sniffing() -> None:
    old = 'any(line.startswith("[timeout") for t in texts for line in t.splitlines())'
    assert sniffers(ast.parse(old)) == [1]
    assert sniffers(ast.parse('"[timeout]" in text')) == [1]
