"""Build one bundle: install its requirements into a folder, compile, zip deterministically.

Python: `pip install --target` (for Lambda targets only manylinux wheels for the target's
CPython, so nothing is compiled on the build machine), bytecode compiled by the target's
interpreter when one is found (`unchecked-hash` pycs stay valid after unzipping, whatever
the files' times). A Python bundle's folder goes on `PYTHONPATH` as it is.

Node: `npm install --omit=dev --ignore-scripts`; the zip holds `node_modules/` (plus the
package.json and lock npm wrote), and the runner puts `<bundle>/node_modules` on `NODE_PATH`.
"""

from __future__ import annotations

import functools
import glob
import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kiln.bundles.identity import Target, parse_target, split_node_requirement
from kiln.bundles.owned_dirs import temp_place
from kiln.bundles.store import BundleRecord
from kiln.settings import inherited_environment

Progress = Callable[[str], None]

DEFAULT_MAX_UNPACKED_BYTES = 200 * 1024 * 1024
INSTALL_TIMEOUT_S = 600.0
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)
# Left out of every zip: console scripts carry the build machine's interpreter path, and
# `.bin` links do not survive a zip.
_SKIP_TOP = {"bin", ".bin"}


class BuildError(Exception):
    """A build that did not produce a bundle; `log` is everything the tools printed."""

    def __init__(self, reason: str, log: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.log = log


@dataclass(frozen=True)
class Toolchain:
    """What a build uses from its machine (from `Settings`: KILN_NPM, KILN_NODE_BINARY,
    PYENV_ROOT, KILN_BUNDLE_MAX_UNPACKED_MB); the defaults find everything on PATH."""

    npm: str | None = None
    node_binary: str | None = None
    pyenv_root: str | None = None
    max_unpacked_bytes: int = DEFAULT_MAX_UNPACKED_BYTES

    @classmethod
    def from_settings(cls, settings: Any) -> Toolchain:
        limit_mb = settings.bundle_max_unpacked_mb
        return cls(
            npm=settings.npm,
            node_binary=settings.node_binary,
            pyenv_root=settings.pyenv_root,
            max_unpacked_bytes=int(limit_mb * 2**20) if limit_mb else DEFAULT_MAX_UNPACKED_BYTES,
        )


@dataclass
class BuildOutput:
    zip_path: Path
    manifest: dict[str, Any]
    log: str
    duration_s: float


@dataclass
class _Log:
    """One build's log, and the toolchain its commands run with."""

    tools: Toolchain = field(default_factory=lambda: Toolchain())
    lines: list[str] = field(default_factory=list)

    def add(self, text: str) -> None:
        self.lines.append(text.rstrip("\n"))

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def build_bundle(
    record: BundleRecord,
    *,
    workdir: Path,
    progress: Progress | None = None,
    max_bytes: int | None = None,
    toolchain: Toolchain | None = None,
) -> BuildOutput:
    """Build `record`'s bundle under `workdir`; raises BuildError with the log on failure."""
    say = progress or (lambda _message: None)
    tools = toolchain or Toolchain()
    limit = tools.max_unpacked_bytes if max_bytes is None else max_bytes
    target = parse_target(record.target)
    log = _Log(tools)
    log.add(f"# kiln bundle {record.id}: {record.language} for {record.target}")
    log.add(f"# requirements: {', '.join(record.requirements)}")
    started = time.monotonic()
    install_dir = workdir / "install"
    shutil.rmtree(install_dir, ignore_errors=True)
    install_dir.mkdir(parents=True)
    if target.language == "python":
        say(f"pip install {' '.join(record.requirements)} for {record.target}")
        lock = _install_python(record, target, install_dir, workdir, log)
        root = install_dir
        say("compiling bytecode")
        compiled_by = _compile_python(target, root, log)
    else:
        say(f"npm install {' '.join(record.requirements)}")
        lock = _install_node(record, install_dir, log)
        root = install_dir
        compiled_by = None
    files = sorted(_bundle_files(root))
    unpacked = sum(path.stat().st_size for path in files)
    if unpacked > limit:
        reason = (
            f"the installed packages take {unpacked / 2**20:.1f} MB, over the bundle limit of "
            f"{limit / 2**20:.0f} MB (KILN_BUNDLE_MAX_UNPACKED_MB); use fewer or smaller packages"
        )
        log.add(f"# refused: {reason}")
        raise BuildError(reason, log.text())
    say(f"zipping {len(files)} files ({unpacked / 2**20:.1f} MB)")
    zip_path = workdir / f"{record.id}.zip"
    _write_zip(zip_path, root, files)
    duration = time.monotonic() - started
    manifest: dict[str, Any] = {
        "bundle_id": record.id,
        "language": record.language,
        "target": record.target,
        "requirements": list(record.requirements),
        "lock": lock,
        "file_count": len(files),
        "unpacked_size": unpacked,
        "zip_size": zip_path.stat().st_size,
        "zip_sha256": _sha256(zip_path),
        "bytecode_compiled_by": compiled_by,
        "duration_s": round(duration, 3),
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "builder": {"python": sys.version.split()[0], "platform": sys.platform},
    }
    log.add(f"# done in {duration:.1f} s: {len(files)} files, {unpacked} bytes unpacked")
    return BuildOutput(zip_path=zip_path, manifest=manifest, log=log.text(), duration_s=duration)


# -- Python ---------------------------------------------------------------------------------


def _install_python(
    record: BundleRecord, target: Target, install_dir: Path, workdir: Path, log: _Log
) -> list[dict[str, Any]]:
    report = workdir / "pip-report.json"
    command = [
        sys.executable, "-m", "pip", "install",
        "--target", str(install_dir),
        "--no-compile", "--no-input", "--disable-pip-version-check",
        "--no-warn-script-location", "--progress-bar", "off",
        "--report", str(report),
    ]  # fmt: skip
    if target.is_lambda:
        for platform_tag in target.manylinux_platforms:
            command += ["--platform", platform_tag]
        command += [
            "--python-version", str(target.python_version),
            "--implementation", "cp",
            "--only-binary=:all:",
        ]  # fmt: skip
    elif target.python_version != f"{sys.version_info.major}.{sys.version_info.minor}":
        raise BuildError(
            f"target {record.target} needs Python {target.python_version}, but this builder "
            f"runs {sys.version_info.major}.{sys.version_info.minor}; build a lambda-* target "
            "or run the builder on that Python",
            log.text(),
        )
    command += ["--", *record.requirements]
    _run(command, log, what="pip install", cwd=workdir)
    return _pip_lock(report)


def _pip_lock(report: Path) -> list[dict[str, Any]]:
    data = json.loads(report.read_text())
    lock = []
    for item in data.get("install", []):
        meta = item.get("metadata", {})
        info = item.get("download_info", {})
        hashes = info.get("archive_info", {}).get("hashes", {})
        lock.append(
            {
                "name": meta.get("name"),
                "version": meta.get("version"),
                "url": info.get("url"),
                "sha256": hashes.get("sha256"),
            }
        )
    return sorted(lock, key=lambda entry: str(entry["name"]).lower())


@functools.cache
def target_interpreter(target: Target, pyenv_root: str | None = None) -> str | None:
    """A CPython for the target's version on this machine: ours, one under pyenv, or on PATH."""
    version = str(target.python_version)
    if version == f"{sys.version_info.major}.{sys.version_info.minor}":
        return sys.executable
    candidates: list[str] = []
    for root in filter(None, [pyenv_root, str(Path.home() / ".pyenv")]):
        candidates += sorted(glob.glob(f"{root}/versions/{version}.*/bin/python{version}"))[::-1]
    found = shutil.which(f"python{version}")
    if found and "/shims/" not in found:  # a pyenv shim may name a version it cannot run
        candidates.append(found)
    for candidate in candidates:
        probe = subprocess.run(
            [candidate, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True, text=True, check=False, timeout=30,
        )  # fmt: skip
        if probe.returncode == 0 and probe.stdout.strip() == version:
            return candidate
    return None


def _compile_python(target: Target, root: Path, log: _Log) -> str | None:
    interpreter = target_interpreter(target, log.tools.pyenv_root)
    if interpreter is None:
        log.add(f"# no Python {target.python_version} here: bytecode is left to the first import")
        return None
    command = [
        interpreter, "-m", "compileall", "-q", "-j", "0",
        "--invalidation-mode", "unchecked-hash",
        # Relative names keep the zip the same wherever it was built; the import system
        # puts the real path back into code objects when it loads a pyc.
        "-s", str(root),
        str(root),
    ]  # fmt: skip
    try:
        _run(command, log, what="compileall", cwd=root)
    except BuildError:
        # A package may ship files that do not compile (templates, py2 leftovers); the
        # bundle still works, those files are compiled on import or never.
        log.add("# some files did not compile; they are left as source")
    return interpreter


# -- Node -----------------------------------------------------------------------------------


def _install_node(record: BundleRecord, install_dir: Path, log: _Log) -> list[dict[str, Any]]:
    dependencies = {}
    for requirement in record.requirements:
        name, spec = split_node_requirement(requirement)
        dependencies[name] = spec or "*"
    (install_dir / "package.json").write_text(
        json.dumps({"name": "kiln-bundle", "private": True, "dependencies": dependencies})
    )
    npm = find_npm(log.tools)
    if npm is None:
        raise BuildError(
            "npm is not installed on the builder (set KILN_NPM, or KILN_NODE_BINARY with npm "
            "beside it)",
            log.text(),
        )
    command = [
        npm, "install", "--prefix", str(install_dir),
        "--omit=dev", "--ignore-scripts", "--no-audit", "--no-fund",
        "--no-update-notifier", "--loglevel", "warn",
    ]  # fmt: skip
    _run(command, log, what="npm install", cwd=install_dir)
    lock_file = install_dir / "package-lock.json"
    packages = json.loads(lock_file.read_text()).get("packages", {}) if lock_file.exists() else {}
    lock = [
        {
            "name": path.removeprefix("node_modules/"),
            "version": entry.get("version"),
            "url": entry.get("resolved"),
            "integrity": entry.get("integrity"),
        }
        for path, entry in packages.items()
        if path
    ]
    return sorted(lock, key=lambda entry: str(entry["name"]))


def find_npm(tools: Toolchain) -> str | None:
    """KILN_NPM, else the npm beside KILN_NODE_BINARY (the Lambda layer), else PATH's."""
    if tools.npm:
        return tools.npm
    node = tools.node_binary
    if node and (Path(node).parent / "npm").is_file():
        return str(Path(node).parent / "npm")
    return shutil.which("npm")


# -- shared ---------------------------------------------------------------------------------


def _run(command: list[str], log: _Log, *, what: str, cwd: Path) -> None:
    log.add("$ " + " ".join(command))
    env = inherited_environment(PIP_NO_INPUT="1", PYTHONDONTWRITEBYTECODE="1")
    node = log.tools.node_binary
    if node:  # npm runs `node` from PATH
        env["PATH"] = f"{Path(node).parent}{os.pathsep}{env.get('PATH', '')}"
    if not os.access(Path.home(), os.W_OK):  # Lambda: only /tmp is writable
        scratch_home = temp_place("kiln-build-home")  # pip reads its settings from here
        env["HOME"] = str(scratch_home)
        env.setdefault("PIP_CACHE_DIR", str(scratch_home / "pip-cache"))
        env.setdefault("npm_config_cache", str(scratch_home / "npm-cache"))
    try:
        completed = subprocess.run(
            command,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=INSTALL_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        log.add((exc.stdout or b"").decode("utf-8", "replace"))
        raise BuildError(
            f"{what} did not finish within {INSTALL_TIMEOUT_S:.0f} s", log.text()
        ) from exc
    output = completed.stdout.decode("utf-8", "replace")
    log.add(output)
    if completed.returncode != 0:
        raise BuildError(
            f"{what} failed (exit {completed.returncode}): {_last_error(output)}", log.text()
        )


def _last_error(output: str) -> str:
    """The line of a tool's output that says what went wrong, for the record's `error`."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    for line in lines:
        if line.startswith("ERROR:") or line.startswith("npm error") or line.startswith("npm ERR!"):
            return line[:500]
    return lines[-1][:500] if lines else "no output"


def _bundle_files(root: Path) -> Iterator[Path]:
    for current, dirs, names in os.walk(root):
        here = Path(current)
        if here == root:
            dirs[:] = [d for d in dirs if d not in _SKIP_TOP]
        dirs[:] = [d for d in dirs if not (here / d).is_symlink()]
        for name in names:
            path = here / name
            if path.is_symlink() or not path.is_file():
                continue
            yield path


def _write_zip(zip_path: Path, root: Path, files: list[Path]) -> None:
    """Same files in, same bytes out: sorted names, fixed times and modes."""
    with zipfile.ZipFile(zip_path, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=6) as zf:
        for path in files:
            info = zipfile.ZipInfo(path.relative_to(root).as_posix(), date_time=_ZIP_TIME)
            executable = path.stat().st_mode & stat.S_IXUSR
            info.external_attr = ((0o755 if executable else 0o644) | stat.S_IFREG) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            with path.open("rb") as source, zf.open(info, "w") as sink:
                shutil.copyfileobj(source, sink, 1024 * 1024)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1024 * 1024), b""):
            digest.update(chunk)
    return digest.hexdigest()
