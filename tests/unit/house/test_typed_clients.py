"""AWS clients are typed with boto3-stubs' client types, never `Any`.

A parameter or field named for a client (`dynamodb`, `ddb`, `s3`, `ssm`, `lambda_client`,
`session`) and annotated `Any` hides every call on it from mypy: a misspelt operation or a wrong
TypedDict key then fails only in AWS. The stubs are imported under `if TYPE_CHECKING:` (the
cold-start import test keeps them out of a Lambda's imports).
"""

from __future__ import annotations

import ast
from pathlib import Path

KILN = Path(__file__).resolve().parents[3] / "functions" / "kiln"
CLIENT_NAMES = {"dynamodb", "ddb", "s3", "ssm", "lambda_client", "session"}


def untyped_clients(tree: ast.AST) -> list[str]:
    """`line: name` for each client-named parameter or field of `tree` annotated `Any`."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.arg):
            name, annotation = node.arg, node.annotation
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            name, annotation = node.target.id, node.annotation
        else:
            continue
        if name in CLIENT_NAMES and annotation is not None and ast.unparse(annotation) == "Any":
            found.append((node.lineno, name))
    return [f"{line}: {name}" for line, name in sorted(found)]


def test_no_aws_client_is_typed_any() -> None:
    strays = {
        str(path.relative_to(KILN)): untyped_clients(ast.parse(path.read_text()))
        for path in sorted(KILN.rglob("*.py"))
    }
    strays = {name: found for name, found in strays.items() if found}
    assert not strays, f"AWS clients typed Any (use the mypy_boto3_* client types): {strays}"


def test_the_check_sees_an_any_client() -> None:
    tree = ast.parse("def f(dynamodb: Any, s3: 'S3Client') -> None: ...\nsession: Any = None")
    assert untyped_clients(tree) == ["1: dynamodb", "2: session"]
