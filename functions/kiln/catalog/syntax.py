"""Save-time syntax check: Python must compile, Node must parse (`node --check`).

One function for every save path (REST, the admin MCP tools, tool folders) and for the
studio's dry run, so a script that cannot even start is refused when it is saved, with the
line and column of the problem, instead of failing at its first call.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from pathlib import Path

from kiln.catalog.rules import RuleError, Violation

NODE_CHECK_TIMEOUT_S = 10.0
_NODE_WHERE = re.compile(r":(\d+)\s*$")


def syntax_problem(language: str, code: str, node: Path | None) -> Violation | None:
    """The `code` violation (rule `syntax`) that stops the script from starting, or None.

    Node code is checked only when a `node` binary is given (where there is none, Node tools
    cannot run anyway and say so at their call).
    """
    if language == "python":
        return _python(code)
    if node is not None:
        return _node(code, node)
    return None


def available_node() -> Path | None:
    """The `node` the runner would use, or None when there is none here."""
    from kiln.runner.errors import NodeUnavailableError
    from kiln.runner.nodejs import find_node

    try:
        return find_node()
    except NodeUnavailableError:
        return None


def check_syntax(language: str, code: str, node: Path | None) -> None:
    """Raise RuleError (field `code`, rule `syntax`, with line and column) if it cannot parse."""
    problem = syntax_problem(language, code, node)
    if problem is not None:
        raise RuleError([problem])


def _violation(line: int, column: int, message: str) -> Violation:
    text = f"code does not parse: line {line}, column {column}: {message}"
    return Violation("code", "syntax", text)


def _python(code: str) -> Violation | None:
    try:
        compile(code, "main.py", "exec", dont_inherit=True)
    except SyntaxError as error:
        return _violation(error.lineno or 1, error.offset or 1, error.msg)
    except ValueError as error:  # e.g. a NUL byte in the source
        return _violation(1, 1, str(error))
    return None


def _node(code: str, node: Path) -> Violation | None:
    with tempfile.TemporaryDirectory(prefix="kiln-check-") as folder:
        script = Path(folder) / "main.js"
        script.write_text(code, "utf-8")
        try:
            done = subprocess.run(
                [str(node), "--check", str(script)],
                capture_output=True,
                text=True,
                timeout=NODE_CHECK_TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired):
            return None  # the check could not run; the call will say what is wrong
    if done.returncode == 0:
        return None
    return _node_violation(done.stderr, str(script))


def _node_violation(stderr: str, script: str) -> Violation:
    """Line, column and message from node's report: `file:LINE`, the line, a caret, the error."""
    lines = stderr.splitlines()
    line, column = 1, 1
    for index, text in enumerate(lines):
        if text.startswith(script):
            found = _NODE_WHERE.search(text)
            if found:
                line = int(found.group(1))
            if index + 2 < len(lines) and "^" in lines[index + 2]:
                column = lines[index + 2].index("^") + 1
            break
    message = next(
        (text.strip() for text in reversed(lines) if re.match(r"\s*\w*Error: ", text)),
        "node --check refused it",
    )
    return _violation(line, column, message)
