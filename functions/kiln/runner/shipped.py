"""What every run finds beside its script: the tool's own files, and Kiln's `kiln_tools`.

`kiln_tools/` (this room's folder of that name) is the helper for calling other tools
(TALKING.md, "Calling tools"): `__init__.py` makes it `import kiln_tools` in a Python run,
`index.js` and its `package.json` (CommonJS whatever a tool's own `package.json` says)
`require("./kiln_tools")` in a Node run. It is written into each run's private directory, so a
run that changes its copy changes only its own; the catalog refuses tool files named
`kiln_tools…` (kiln.catalog.toolfiles), and a tool saved before that rule keeps its own.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path

from kiln.runner.model import Language

HELPER = "kiln_tools"
_SOURCE = Path(__file__).with_name(HELPER)
# What each language's `import` / `require` reads: a run gets only its own language's files.
_FILES: dict[Language, tuple[str, ...]] = {
    "python": ("__init__.py",),
    "node": ("index.js", "package.json"),
}


@functools.cache
def helper_files(language: Language) -> dict[str, bytes]:
    """The helper as a run's files: relative path -> bytes (read once per process)."""
    return {f"{HELPER}/{name}": (_SOURCE / name).read_bytes() for name in _FILES[language]}


def write_run_files(run_dir: Path, files: Mapping[str, bytes], language: Language) -> None:
    """The tool's own files (paths were checked on save), then the helper, unless the tool's
    files already use its name."""
    if not any(_is_helper(relative) for relative in files):
        files = {**files, **helper_files(language)}
    for relative, data in files.items():
        path = run_dir / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def _is_helper(relative: str) -> bool:
    first = relative.split("/", 1)[0]
    return first == HELPER or first.startswith(HELPER + ".")
