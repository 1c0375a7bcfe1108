"""Python bundles installed by uv: resolve to a lock, then install exactly that lock.

Two uv commands per build. `uv pip compile` resolves the requirements for the target's
platform and Python (the same manylinux tags and CPython version pip was given) and writes a
PEP 751 lock (`pylock.toml`: each package's wheel URL and sha256, which become the bundle's
`lock`); `uv pip install --no-deps --target` then installs exactly those pins.

When the cache is not fresh (a cold build), the order is turned round so that one uv process
resolves and downloads: `uv pip install --target` of the requirements first (uv fetches
wheels while it is still resolving), then `uv pip compile --offline` for the lock, from what
that install just cached (~0.05 s). The install is used only if it holds exactly the locked
names and versions; otherwise it is thrown away and the pins are installed as above.

Both use one cache that outlives the build (`Toolchain.cache_dir`: `<state dir>/build-cache`
under `kiln dev`, `/tmp/kiln-build-cache` on the builder function), so a second tool whose
requirements overlap an earlier one's downloads only what is new. A cache refreshed from the
index less than `FRESH_FOR_S` ago is trusted as it is: the build first resolves `--offline`
(no index round trips) and asks the index only when that fails, which is what an HTTP cache
honouring PyPI's own `max-age=600` on its simple pages would do. When it fails, each
requirement is tried offline alone, and only those the cache cannot resolve are fetched (one
`uv pip install` of them, which caches their pages and wheels) before the offline resolve is
tried again: a second tool adding one package asks the index about that package, not about
every package it shares with the first (uv revalidates each page it resolves online; behind a
proxy that drops the cache headers, that is ~20 requests in dependency order). Anything else
still resolves online.
"""

from __future__ import annotations

import os
import re
import shutil
import time
import tomllib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
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
        self,
        uv: str,
        *,
        target_args: list[str],
        cache_dir: Path | None,
        workdir: Path,
        run: Run,
        early: Path | None = None,
    ) -> None:
        """`early`: where a cold build's one-process install goes (on the filesystem of the
        folder it is later installed into, so that it can be renamed there)."""
        self.uv = uv
        self.early = early or workdir / "early-install"
        self.installed: Path | None = None  # the early install, until `install` takes it
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
        offline = [*command, "--offline"]
        if self.offline and _try(self.run, offline, "uv pip compile (offline)"):
            return _read_lock(lock_file)
        after_fetch = "uv pip compile (offline, after fetching what was new)"
        if (  # a fresh cache that lacks a few packages
            self.offline
            and self._fetch_missing(requirements)
            and _try(self.run, offline, after_fetch)
        ):
            return _read_lock(lock_file)
        cold, self.offline = not self.offline, False
        if not (
            cold
            and self._install_early(self.workdir / "requirements.in")
            and _try(self.run, offline, "uv pip compile (offline, after the install)")
        ):
            self.run(command, "uv pip compile")
        _touch(self.cache_dir)
        return _read_lock(lock_file)

    def _fetch_missing(self, requirements: list[str]) -> bool:
        """Fetch from the index only the requirements the fresh cache cannot resolve alone
        (each tried offline, at once): a second tool that adds one package to an earlier
        tool's asks the index about that package, not again about every package it shares.
        False when none is missing alone (a conflict only the index can settle) or the fetch
        fails; the caller then resolves everything online."""
        probes = [
            [self.uv, "pip", "compile", *self.common, "--quiet", "--no-header", "--offline",
             "--only-binary", ":all:", "-o", str(self.workdir / f"probe-{number}.txt"),
             str(self._requirement_file(f"probe-{number}.in", [requirement]))]
            for number, requirement in enumerate(requirements)
        ]  # fmt: skip
        with ThreadPoolExecutor(max_workers=min(4, len(probes) or 1)) as pool:
            found = list(pool.map(self._probe, probes))
        missing = [wanted for wanted, ok in zip(requirements, found, strict=True) if not ok]
        if not missing:
            return False
        fetched = self.workdir / "fetched"  # installed only so that uv caches the wheels
        command = [
            self.uv, "pip", "install", *self.common, "--no-compile", "--only-binary", ":all:",
            "--target", str(fetched), "-r", str(self._requirement_file("new.in", missing)),
        ]  # fmt: skip
        try:
            return _try(self.run, command, "uv pip install (what was new)")
        finally:
            shutil.rmtree(fetched, ignore_errors=True)

    def _probe(self, command: list[str]) -> bool:
        return _try(self.run, command, "uv pip compile (probe)")

    def _requirement_file(self, name: str, requirements: list[str]) -> Path:
        path = self.workdir / name
        path.write_text("\n".join(requirements) + "\n")
        return path

    def _install_early(self, requirements: Path) -> bool:
        """Resolve, download and install in one process (see the module's docstring)."""
        command = [
            self.uv, "pip", "install", *self.common, "--no-compile",
            "--only-binary", ":all:", "--target", str(self.early), "-r", str(requirements),
        ]  # fmt: skip
        if _try(self.run, command, "uv pip install (resolving)"):
            self.installed = self.early
            return True
        self.discard()
        return False

    def discard(self) -> None:
        """Remove an early install that no `install` took."""
        self.installed = None
        shutil.rmtree(self.early, ignore_errors=True)

    def install(self, lock: list[dict[str, Any]], into: Path) -> None:
        """Install exactly these pins (no resolution) into `into`."""
        if self._take_early(lock, into):
            return
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

    def _take_early(self, lock: list[dict[str, Any]], into: Path) -> bool:
        """Move the early install to `into` (absent or empty) if it holds exactly `lock`."""
        early, self.installed = self.installed, None
        if early is None:
            return False
        wanted = {(_canonical(str(entry["name"])), str(entry["version"])) for entry in lock}
        if _dist_infos(early) == wanted:
            try:
                into.parent.mkdir(parents=True, exist_ok=True)
                os.rename(early, into)  # replaces an empty folder
                return True
            except OSError:  # another filesystem, or `into` not empty: install the pins
                pass
        self.discard()
        return False


def _dist_infos(site: Path) -> set[tuple[str, str]]:
    """(name, version) of every distribution installed in `site`."""
    found = set()
    for dist_info in site.glob("*.dist-info"):
        name, _, version = dist_info.name.removesuffix(".dist-info").rpartition("-")
        found.add((_canonical(name), version))
    return found


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


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
