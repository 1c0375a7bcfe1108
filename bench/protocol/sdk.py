"""The official MCP SDK that benchmarks measure Kiln against, in a venv of its own.

The SDK's pins would clash with Kiln's, so it is kept out of Kiln's venv: `python()` returns
the interpreter of a venv holding `PINS`, made on first use (by uv, as the tests make theirs:
`tests.support.toolchain.python_venv`) in `KILN_BENCH_SDK` or else
`~/.cache/kiln-bench-sdk-<pins>`, and reused after. `bench.protocol.run` serves the
yardsticks' `ref_server.py` from it; `bench.coldstart.run` starts the SDK's stateless app on it.
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

from tests.support.toolchain import ToolchainError, python_venv

PINS = ("mcp==2.3.0", "mangum==0.22.0", "uvicorn==0.55.0")


def python() -> Path:
    """The SDK venv's interpreter, the venv made first if it is absent (exits on failure)."""
    tag = hashlib.sha256(" ".join(PINS).encode()).hexdigest()[:8]
    venv = Path(os.environ.get("KILN_BENCH_SDK") or Path.home() / f".cache/kiln-bench-sdk-{tag}")
    if not (venv / "bin" / "python").exists():
        print(f"making the SDK's venv in {venv}: {' '.join(PINS)}", file=sys.stderr, flush=True)
    try:
        return python_venv(venv, *PINS)
    except ToolchainError as error:
        sys.exit(f"could not make the SDK's venv in {venv}: {error}")
