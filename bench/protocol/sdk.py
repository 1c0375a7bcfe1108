"""The official MCP SDK that benchmarks measure Kiln against, in a venv of its own.

The SDK's pins would clash with Kiln's, so it is kept out of Kiln's venv: `python()` returns
the interpreter of a venv holding `PINS`, made on first use (a minute, from PyPI) in
`KILN_BENCH_SDK` or else `~/.cache/kiln-bench-sdk`, and reused after. `bench.protocol.run`
serves the yardstick's `ref_server.py` from it; `bench.coldstart.run` starts the SDK's
stateless app on it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

PINS = ("mcp==2.3.0", "mangum==0.22.0", "uvicorn==0.55.0")


def python(venv: Path | None = None) -> Path:
    """The SDK venv's interpreter, the venv made first if it lacks `PINS` (exits on failure)."""
    venv = venv or Path(os.environ.get("KILN_BENCH_SDK") or Path.home() / ".cache/kiln-bench-sdk")
    interpreter = venv / "bin" / "python"
    stamp = venv / "kiln-bench-pins.txt"
    wanted = "\n".join(PINS) + "\n"
    if interpreter.exists() and stamp.exists() and stamp.read_text() == wanted:
        return interpreter
    print(f"making the SDK's venv in {venv}: {' '.join(PINS)}", file=sys.stderr, flush=True)
    log = venv.with_name(venv.name + ".log")
    venv.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as out:
        steps = [
            [sys.executable, "-m", "venv", str(venv)],
            [str(interpreter), "-m", "pip", "install", "-q", *PINS],
        ]
        for step in steps:
            if subprocess.run(step, stdout=out, stderr=subprocess.STDOUT, check=False).returncode:
                sys.exit(f"could not make the SDK's venv ({' '.join(step[-3:])}): see {log}")
    stamp.write_text(wanted)
    return interpreter
