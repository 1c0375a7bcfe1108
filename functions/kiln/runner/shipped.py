"""What every run finds beside its script: the tool's own files, and Kiln's `kiln_tools`.

`kiln_tools/` (this room's folder of that name) is the helper for calling other tools
(TALKING.md, "Calling tools"): `__init__.py` makes it `import kiln_tools` for Python,
`index.js` and its `package.json` (CommonJS whatever a tool's own `package.json` says) make
it `require("./kiln_tools")` for Node. It is written into each run's private directory, so a
run that changes its copy changes only its own; the catalog refuses tool files named
`kiln_tools…` (kiln.catalog.toolfiles), and a tool saved before that rule keeps its own.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path

HELPER = "kiln_tools"
_SOURCE = Path(__file__).with_name(HELPER)
_FILES = ("__init__.py", "index.js", "package.json")


@functools.cache
def helper_files() -> dict[str, bytes]:
    """The helper as run files: relative path -> bytes (read once per process)."""
    return {f"{HELPER}/{name}": (_SOURCE / name).read_bytes() for name in _FILES}


def write_run_files(run_dir: Path, files: Mapping[str, bytes]) -> None:
    """The tool's own files (paths were checked on save), then the helper, unless the tool's
    files already use its name."""
    for relative, data in files.items():
        path = run_dir / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    if any(_is_helper(relative) for relative in files):
        return
    for relative, data in helper_files().items():
        path = run_dir / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def _is_helper(relative: str) -> bool:
    first = relative.split("/", 1)[0]
    return first == HELPER or first.startswith(HELPER + ".")
