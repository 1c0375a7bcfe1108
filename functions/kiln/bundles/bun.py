"""Node bundles installed by Bun, where it is installed (npm otherwise).

`bun install --ignore-scripts` keeps npm's `--ignore-scripts` semantics (no package's
lifecycle script runs, trusted or not) and lays out the same flat `node_modules/` that the
runner puts on NODE_PATH; measured against npm for lodash + dayjs (bench/bundles/run.py) it
installs several times faster, cold and warm. Its downloads go to the build cache
(`<cache>/bun`) when there is one. The lock comes from `bun.lock` (JSON with trailing commas).
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

Run = Callable[[list[str], str, dict[str, str]], None]  # (command, what, extra environment)
_TRAILING_COMMA = re.compile(r",(\s*[}\]])")


def find_bun(configured: str | None = None) -> str | None:
    """KILN_BUN, else `bun` on PATH; KILN_BUN=off means npm."""
    if configured == "off":
        return None
    return configured or shutil.which("bun")


def bun_install(
    bun: str, *, install_dir: Path, cache_dir: Path | None, run: Run
) -> list[dict[str, Any]]:
    """Install the package.json in `install_dir`; returns the bundle's lock."""
    env = {"BUN_INSTALL_CACHE_DIR": str(cache_dir / "bun")} if cache_dir else {}
    env["DO_NOT_TRACK"] = "1"
    command = [bun, "install", "--ignore-scripts", "--no-progress", "--no-summary"]
    run(command, "bun install", env)
    return read_bun_lock(install_dir / "bun.lock")


def read_bun_lock(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    data = json.loads(_TRAILING_COMMA.sub(r"\1", path.read_text()))
    lock = []
    for entry in data.get("packages", {}).values():
        name, _, version = str(entry[0]).rpartition("@")
        lock.append(
            {
                "name": name,
                "version": version,
                "url": entry[1] or None,
                "integrity": entry[3] if len(entry) > 3 else None,
            }
        )
    return sorted(lock, key=lambda item: str(item["name"]))
