"""Python bundles installed by uv: resolve to a lock, then install exactly that lock.

Two uv commands per build. `uv pip compile` resolves the requirements for the target's
platform and Python (the same manylinux tags and CPython version pip was given) and writes a
PEP 751 lock (`pylock.toml`: each package's wheel URL and sha256, which become the bundle's
`lock`); `uv pip install --no-deps --target` then installs exactly those pins.

Both use one cache that outlives the build (`Toolchain.cache_dir`: `<state dir>/build-cache`
under `kiln dev`, `/tmp/kiln-build-cache` on the builder function), so a second tool whose
requirements overlap an earlier one's downloads only what is new. A cache refreshed from the
index less than `FRESH_FOR_S` ago is trusted as it is: the build first resolves `--offline`
(no index round trips) and asks the index only when that fails, which is what an HTTP cache
honouring PyPI's own `max-age=600` on its simple pages would do.
"""

from __future__ import annotations

import shutil
import time
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kiln.bundles.errors import BuildError

FRESH_FOR_S = 600.0
_MARKER = ".kiln-index-checked"

Run = Callable[[list[str], str], None]  # (command, what) -> raises BuildError on failure


def find_uv(configured: str | None = None) -> str | None:
    """KILN_UV, else the binary of the `uv` package installed beside Kiln, else PATH's."""
    if configured:
        return configured
    try:
        from uv import find_uv_bin

        return str(find_uv_bin())
    except (ImportError, FileNotFoundError):
        return shutil.which("uv")


class Uv:
    """uv's two steps for one build: `lock` the requirements, `install` pins into a folder."""

    def __init__(
        self, uv: str, *, target_args: list[str], cache_dir: Path | None, workdir: Path, run: Run
    ) -> None:
        self.uv = uv
        self.cache_dir = cache_dir
        self.workdir = workdir
        self.run = run
        self.common = ["--no-config", *target_args]
        if cache_dir is not None:
            cache_dir.mkdir(parents=True, exist_ok=True)
            self.common += ["--cache-dir", str(cache_dir)]
        self.offline = _fresh(cache_dir)

    def lock(self, requirements: list[str]) -> list[dict[str, Any]]:
        """Resolve for the target; the lock is each package's name, version, wheel and hash."""
        (self.workdir / "requirements.in").write_text("\n".join(requirements) + "\n")
        lock_file = self.workdir / "pylock.toml"
        command = [
            self.uv, "pip", "compile", *self.common, "--quiet", "--no-header",
            "--only-binary", ":all:", "-o", str(lock_file), str(self.workdir / "requirements.in"),
        ]  # fmt: skip
        if not (
            self.offline and _try(self.run, [*command, "--offline"], "uv pip compile (offline)")
        ):
            self.offline = False
            self.run(command, "uv pip compile")
            _touch(self.cache_dir)
        return _read_lock(lock_file)

    def install(self, lock: list[dict[str, Any]], into: Path) -> None:
        """Install exactly these pins (no resolution) into `into`."""
        pins = self.workdir / f"pins-{into.name}.txt"
        pins.write_text("".join(f"{entry['name']}=={entry['version']}\n" for entry in lock))
        command = [
            self.uv, "pip", "install", *self.common, "--no-deps", "--no-compile",
            "--only-binary", ":all:", "--target", str(into), "-r", str(pins),
        ]  # fmt: skip
        if not (
            self.offline and _try(self.run, [*command, "--offline"], "uv pip install (offline)")
        ):
            self.run(command, "uv pip install")


def _try(run: Run, command: list[str], what: str) -> bool:
    try:
        run(command, what)
    except BuildError:
        return False
    return True


def _fresh(cache_dir: Path | None) -> bool:
    if cache_dir is None:
        return False
    try:
        checked = (cache_dir / _MARKER).stat().st_mtime
    except OSError:
        return False
    return time.time() - checked < FRESH_FOR_S


def _touch(cache_dir: Path | None) -> None:
    if cache_dir is not None:
        (cache_dir / _MARKER).touch()


def _read_lock(lock_file: Path) -> list[dict[str, Any]]:
    """The bundle's lock from uv's pylock.toml: name, version, and the wheel uv installs
    (the first listed is the most specific tag for the target)."""
    data = tomllib.loads(lock_file.read_text())
    lock = []
    for package in data.get("packages", []):
        wheels = package.get("wheels") or [{}]
        lock.append(
            {
                "name": package.get("name"),
                "version": package.get("version"),
                "url": wheels[0].get("url"),
                "sha256": wheels[0].get("hashes", {}).get("sha256"),
            }
        )
    return sorted(lock, key=lambda entry: str(entry["name"]).lower())
