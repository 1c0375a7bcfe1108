"""The Lambda entry points as the runtime loads them: what one function's init builds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

PROBE = """
import json, sys
import kiln.lambda_handlers as handlers
getattr(handlers, sys.argv[1])
print(json.dumps({
    "built": sorted(n for n in ("mcp", "admin", "builder") if n in vars(handlers)),
    "tracer": "aws_xray_sdk" in sys.modules,
    "fastapi": "fastapi" in sys.modules,
    "rest api": "kiln.api.tools" in sys.modules,
    "authoring": "kiln.authoring.service" in sys.modules,
}))
"""


def load(handler: str, **env: str) -> dict[str, object]:
    """Import kiln.lambda_handlers in a fresh process and look `handler` up, as the runtime does."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("KILN_", "POWERTOOLS_"))}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, handler],
        env={
            **clean,
            "PYTHONPATH": str(ROOT / "functions"),
            "AWS_REGION": "us-east-1",
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            **env,
        },
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_the_public_function_builds_only_its_own_handler_without_the_tracer() -> None:
    # Bare Starlette with /mcp only: no FastAPI, no REST routers, no authoring service.
    assert load("mcp") == {
        "built": ["mcp"],
        "tracer": False,
        "fastapi": False,
        "rest api": False,
        "authoring": False,
    }


def test_the_admin_function_builds_the_fastapi_app_with_the_rest_api() -> None:
    loaded = load("admin")
    assert loaded["built"] == ["admin"]
    assert loaded["fastapi"] is True
    assert loaded["rest api"] is True


def test_the_tracer_is_imported_only_when_tracing_is_on() -> None:
    assert load("mcp", KILN_TRACING="true")["tracer"] is True


def test_the_builder_function_never_imports_the_web_app() -> None:
    loaded = load("builder")
    assert loaded["built"] == ["builder"]
    assert (loaded["tracer"], loaded["fastapi"], loaded["rest api"]) == (False, False, False)


def test_an_unknown_handler_name_fails_the_init_with_its_name() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, "mpc"],
        env={**os.environ, "PYTHONPATH": str(ROOT / "functions"), "AWS_REGION": "us-east-1"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0
    assert "has no attribute 'mpc'" in done.stderr
