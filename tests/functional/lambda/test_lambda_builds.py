"""What a Lambda function holds and loads: never `kiln.cli` (the `kiln` command) or
`kiln.local` (kiln dev, kiln stdio, the emulator).

Every function of template.yaml is built as `sam build` builds it (BuildMethod: makefile:
its Makefile target run on a copy of the CodeUri, ARTIFACTS_DIR set), and the artifact is
read. Each handler is imported in a fresh process as the Lambda runtime does (the attribute
lookup builds it), the HTTP ones answer one captured event, and `sys.modules` is read: once
from the source tree, and once from the built artifact, where an import of either would
fail outright.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cfnlint.decode import decode

from conftest import AwsStack
from support import toolchain

ROOT = Path(__file__).resolve().parents[3]
PYTHON_313 = toolchain.python("3.13")  # the Makefile compiles with the runtime's Python
EVENTS = {
    "mcp": ROOT / "tests" / "events" / "http-api-tools-list.json",
    "admin": ROOT / "tests" / "events" / "http-api-admin-health.json",
}

PROBE = """
import json, sys
import kiln.lambda_handlers as handlers

class Context:
    aws_request_id = "probe"
    function_name = "kiln-probe"
    memory_limit_in_mb = 1024
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:kiln-probe"
    def get_remaining_time_in_millis(self):
        return 30000

handler = getattr(handlers, sys.argv[1])
event = sys.stdin.read()
status = handler(json.loads(event), Context())["statusCode"] if event else None
print(json.dumps({
    "status": status,
    "file": handlers.__file__,
    "loaded": sorted(m for m in sys.modules if m.startswith(("kiln.cli", "kiln.local"))),
}))
"""


def functions() -> dict[str, dict[str, Any]]:
    """template.yaml's functions, by logical id, with the Globals' CodeUri filled in."""
    data, problems = decode(str(ROOT / "template.yaml"))
    assert not problems, problems
    code_uri = data["Globals"]["Function"]["CodeUri"]
    return {
        name: {"CodeUri": code_uri, **resource["Properties"], **resource.get("Metadata", {})}
        for name, resource in data["Resources"].items()
        if resource["Type"] == "AWS::Serverless::Function"
    }


FUNCTIONS = functions()
HANDLERS = sorted(f["Handler"].removeprefix("kiln.lambda_handlers.") for f in FUNCTIONS.values())


def probe(handler: str, aws: AwsStack, code: Path) -> dict[str, Any]:
    """Import `handler` from `code` in a fresh process as Lambda does; what it loaded."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("KILN_", "POWERTOOLS_"))}
    event = ""
    if handler in EVENTS:
        loaded_event = json.loads(EVENTS[handler].read_text())
        loaded_event["headers"]["host"] = "127.0.0.1:8000"
        event = json.dumps(loaded_event)
    done = subprocess.run(
        [sys.executable, "-c", PROBE, handler],
        input=event,
        env={
            **clean,
            "PYTHONPATH": str(code),
            "PYTHONDONTWRITEBYTECODE": "1",
            "AWS_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": aws.endpoint_url,
            "AWS_LAMBDA_FUNCTION_NAME": f"kiln-{handler}",
            "KILN_TABLE": aws.table,
            "KILN_BUCKET": aws.bucket,
            "KILN_AUTHOR_KEY": "probe-author-key-0123456789",
        },
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    assert Path(result["file"]).is_relative_to(code), f"{handler} came from {result['file']}"
    if handler in EVENTS:
        assert result["status"] == 200, done.stderr[-3000:]
    return result


def test_every_function_of_the_template_has_a_handler_here() -> None:
    assert set(HANDLERS) >= {"mcp", "admin", "builder", "worker", "runner"}
    for name, function in FUNCTIONS.items():
        assert function["Handler"].startswith("kiln.lambda_handlers."), name


@pytest.mark.parametrize("handler", HANDLERS)
def test_a_lambda_handler_loads_neither_the_cli_nor_the_local_stack(
    aws: AwsStack, handler: str
) -> None:
    result = probe(handler, aws, ROOT / "functions")
    assert result["loaded"] == [], f"{handler} imported {result['loaded']}"


@pytest.fixture(scope="module")
def source_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The CodeUri as a fresh checkout holds it (sam copies it to a scratch folder first)."""
    copy = tmp_path_factory.mktemp("codeuri") / "functions"
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "node_modules")
    shutil.copytree(ROOT / "functions", copy, ignore=ignore)
    return copy


@pytest.mark.skipif(PYTHON_313 is None, reason=toolchain.NO_PYTHON_313)
@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_the_sam_build_of_each_function_holds_neither_the_cli_nor_the_local_stack(
    aws: AwsStack, source_copy: Path, tmp_path: Path, name: str
) -> None:
    function = FUNCTIONS[name]
    assert function.get("BuildMethod") == "makefile", f"{name}: sam would not run the Makefile"
    assert function["CodeUri"].rstrip("/") == "functions", name
    artifacts = tmp_path / name
    done = subprocess.run(
        ["make", "-C", str(source_copy), f"build-{name}", f"ARTIFACTS_DIR={artifacts}",
         f"PYTHON={PYTHON_313}"],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, f"make build-{name}:\n{done.stdout[-2000:]}{done.stderr[-2000:]}"
    held = sorted(p.relative_to(artifacts).as_posix() for p in artifacts.rglob("*"))
    assert "kiln/lambda_handlers.py" in held, held[:20]
    left_in = [p for p in held if p.startswith(("kiln/cli", "kiln/local"))]
    assert left_in == [], f"{name}'s artifact holds {left_in[:10]}"
    handler = function["Handler"].removeprefix("kiln.lambda_handlers.")
    assert probe(handler, aws, artifacts)["loaded"] == []
