"""Syntax checks for a tool's script, run before it is saved: Python compiles, Node parses.

One check for every save path (REST, the admin MCP tools, tool folders and `kiln tools push`)
and for the studio's dry run, so a script that cannot even start is refused when it is saved,
with the line and column of the problem, instead of failing at its first call.

The script is only parsed, never run: Python's `compile` in this process, Node's `--check`
in a child process with a deadline (parsing needs no network, no environment and no secrets).
"""

from __future__ import annotations

import re
import subprocess
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

from kiln.catalog.rules import RuleError, Violation
from kiln.runner.errors import NodeUnavailableError
from kiln.runner.nodejs import find_node

NODE_CHECK_TIMEOUT_S = 10.0
_LOCATION = re.compile(r":(\d+)\s*$")
_MESSAGE = re.compile(r"^(SyntaxError|ReferenceError|TypeError): (.*)$", re.MULTILINE)


@dataclass(frozen=True)
class SyntaxProblem:
    """Where the parser stopped (1-based line and column) and what it said."""

    line: int
    column: int
    message: str

    def to_json(self) -> dict[str, object]:
        return {"line": self.line, "column": self.column, "message": self.message}


class SyntaxCheckUnavailableError(Exception):
    """The language's checker cannot run here (no Node.js binary)."""


def check_python(code: str) -> SyntaxProblem | None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # SyntaxWarning (odd escapes) is not an error
            compile(code, "main.py", "exec", dont_inherit=True)
    except SyntaxError as error:
        return SyntaxProblem(error.lineno or 1, error.offset or 1, error.msg)
    except (ValueError, RecursionError, MemoryError) as error:
        return SyntaxProblem(1, 1, f"cannot be compiled: {type(error).__name__}")
    return None


def check_node(code: str, node_binary: Path | None = None) -> SyntaxProblem | None:
    """Parse `code` as the CommonJS `main.js` the runner would start."""
    try:
        node = find_node(node_binary)
    except NodeUnavailableError as error:
        raise SyntaxCheckUnavailableError(str(error)) from None
    with tempfile.TemporaryDirectory(prefix="kiln-check-") as folder:
        script = Path(folder) / "main.js"
        script.write_text(code, encoding="utf-8")
        try:
            done = subprocess.run(
                [str(node), "--check", str(script)],
                capture_output=True,
                text=True,
                timeout=NODE_CHECK_TIMEOUT_S,
                cwd=folder,
                env={"PATH": "/usr/bin:/bin"},
                check=False,
            )
        except subprocess.TimeoutExpired:
            return SyntaxProblem(
                1, 1, f"Node.js did not finish parsing in {NODE_CHECK_TIMEOUT_S:g} s"
            )
    if done.returncode == 0:
        return None
    return parse_node_error(done.stderr, str(script))


def parse_node_error(stderr: str, script: str) -> SyntaxProblem:
    """`node --check` prints `file:LINE`, the line, a caret line, then `SyntaxError: …`."""
    lines = stderr.splitlines()
    line_no, column = 1, 1
    for index, text in enumerate(lines):
        if text.startswith(script) and (found := _LOCATION.search(text)):
            line_no = int(found.group(1))
            caret = next((t for t in lines[index + 1 : index + 4] if "^" in t), None)
            if caret is not None:
                column = caret.index("^") + 1
            break
    message = _MESSAGE.search(stderr)
    text = f"{message.group(1)}: {message.group(2)}" if message else "Node.js could not parse it"
    return SyntaxProblem(line_no, column, text)


def check_syntax(language: str, code: str, node_binary: Path | None = None) -> SyntaxProblem | None:
    """The first syntax error in `code`, or None; SyntaxCheckUnavailableError without Node."""
    if language == "python":
        return check_python(code)
    return check_node(code, node_binary)


def available_node() -> Path | None:
    """The `node` the runner would use, or None when there is none here."""
    try:
        return find_node()
    except NodeUnavailableError:
        return None


def check_parses(language: str, code: str, node: Path | None) -> None:
    """The save-time rule: RuleError (field `code`, rule `syntax`, line and column) when the
    script cannot parse. Node code is checked only where Node is (without it Node tools cannot
    run here anyway, and their calls say so)."""
    if language != "python" and node is None:
        return
    try:
        problem = check_syntax(language, code, node)
    except SyntaxCheckUnavailableError:
        return
    if problem is not None:
        raise RuleError([syntax_violation(problem)])


def syntax_violation(problem: SyntaxProblem) -> Violation:
    """The save rule's violation for a script that does not parse (the studio's dry run too)."""
    text = f"code does not parse: line {problem.line}, column {problem.column}: {problem.message}"
    return Violation("code", "syntax", text)
