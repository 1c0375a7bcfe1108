"""The CLI makes its settings and AWS clients in one place: `kiln/cli/aws.py`.

A command that made its own (`boto3.client(...)`, `aws_clients(settings)`, a session's
`.client(...)`, `Settings.from_env()`) would read the environment a second way: a profile, a
region or AWS_ENDPOINT_URL honoured by one command and not by the next. This test names each
such call outside kiln/cli/aws.py.
"""

from __future__ import annotations

import ast
from pathlib import Path

CLI = Path(__file__).resolve().parents[3] / "functions" / "kiln" / "cli"
MAKERS = {"aws_clients", "make_clients", "boto3.client", "boto3.resource", "Settings.from_env"}


def makers_in(tree: ast.AST) -> list[str]:
    """`line: call` for each call in `tree` that makes settings or an AWS client."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = ast.unparse(node.func)
        session_client = name.endswith("session.client") or name.endswith("session.resource")
        if name in MAKERS or session_client:
            found.append(f"{node.lineno}: {name}(...)")
    return found


def test_only_cli_aws_makes_settings_and_clients() -> None:
    strays = {
        path.name: makers_in(ast.parse(path.read_text()))
        for path in sorted(CLI.glob("*.py"))
        if path.name != "aws.py"
    }
    strays = {name: calls for name, calls in strays.items() if calls}
    assert not strays, f"kiln/cli makes settings or AWS clients outside cli/aws.py: {strays}"


def test_the_check_sees_a_stray_client() -> None:
    tree = ast.parse("import boto3\nc = boto3.client('lambda')\ns = clients.session.client('ssm')")
    assert makers_in(tree) == ["2: boto3.client(...)", "3: clients.session.client(...)"]
