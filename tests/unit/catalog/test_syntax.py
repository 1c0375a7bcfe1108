"""Python syntax errors found by compiling; Node's `--check` report read into line and column."""

from __future__ import annotations

from kiln.catalog.syntax import SyntaxProblem, check_python, parse_node_error


def test_python_that_compiles_has_no_problem() -> None:
    assert check_python("import json\nprint(json.dumps({'a': 1}))\n") is None


def test_python_syntax_error_gives_its_line_column_and_message() -> None:
    problem = check_python("x = 1\ny = (2 +\n")
    assert problem is not None
    assert problem.line == 2
    assert problem.column >= 1
    assert "never closed" in problem.message


def test_python_with_a_null_byte_is_a_problem_not_a_crash() -> None:
    problem = check_python("x = 1\x00\n")
    assert problem is not None
    assert problem.line == 1


def test_python_is_compiled_never_run() -> None:
    assert check_python("raise SystemExit(3)\nimport os; os._exit(1)\n") is None


def test_node_check_output_becomes_line_column_and_message() -> None:
    stderr = (
        "/tmp/kiln-check-x/main.js:2\n"
        "const b = (2 +;\n"
        "              ^\n\n"
        "SyntaxError: Unexpected token ';'\n"
        "    at wrapSafe (node:internal/modules/cjs/loader:1464:18)\n\n"
        "Node.js v20.20.2\n"
    )
    assert parse_node_error(stderr, "/tmp/kiln-check-x/main.js") == SyntaxProblem(
        2, 15, "SyntaxError: Unexpected token ';'"
    )


def test_unreadable_node_output_still_names_a_place() -> None:
    problem = parse_node_error("something odd\n", "/tmp/main.js")
    assert (problem.line, problem.column) == (1, 1)
    assert "could not parse" in problem.message
