"""Build one bundle: install its requirements into a folder, compile, zip deterministically.

Python: uv (kiln.bundles.uv: a lock resolved, then installed with `--target`, from a cache
kept across builds) or, where uv is not installed or KILN_BUNDLE_INSTALLER=pip says so,
`pip install --target`; for Lambda targets both take only manylinux wheels for the target's
CPython, so nothing is compiled on the build machine. Bytecode is compiled by the target's
interpreter when one is found (`unchecked-hash` pycs stay valid after unzipping, whatever
the files' times). A Python bundle's folder goes on `PYTHONPATH` as it is.

Node: `bun install --ignore-scripts` where Bun is installed (kiln.bundles.bun), else
`npm install --omit=dev --ignore-scripts`; the zip holds `node_modules/` (plus the
package.json and lock the installer wrote), and the runner puts `<bundle>/node_modules` on
`NODE_PATH`.
"""

from __future__ import annotations

import functools
import glob
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kiln.bundles.bun import bun_install, find_bun
from kiln.bundles.contents import Contents, InstalledTree, LayeredContents, write_zip
from kiln.bundles.errors import BuildError
from kiln.bundles.identity import Target, parse_target, split_node_requirement
from kiln.bundles.layers import LayerError, build_layers
from kiln.bundles.owned_dirs import UnsafeDirectoryError, temp_place
from kiln.bundles.settings import BundleSettings
from kiln.bundles.store import BundleRecord
from kiln.bundles.uv import Uv, find_uv
from kiln.settings import inherited_environment

Progress = Callable[[str], None]
HandOver = Callable[[Contents], None]  # given what was built, before it is zipped

DEFAULT_MAX_UNPACKED_BYTES = 200 * 1024 * 1024
INSTALL_TIMEOUT_S = 600.0
_UV_SUMMARY = "\N{MULTIPLICATION SIGN} "  # how uv starts an error's summary line
_UV_REASON = "\u2570\u2500\u25b6 "  # and the reason's line below it


@dataclass(frozen=True)
class Toolchain:
    """What a build uses from its machine (`BundleSettings`, each variable named in
    kiln.settings: KILN_NPM, KILN_UV, KILN_BUILD_CACHE_*, ...); defaults find all on PATH."""

    npm: str | None = None
    node_binary: str | None = None
    pyenv_root: str | None = None
    max_unpacked_bytes: int = DEFAULT_MAX_UNPACKED_BYTES
    installer: str = "auto"  # "uv", "pip", or "auto": uv when it is installed, else pip
    uv: str | None = None  # KILN_UV: the uv binary (default: the `uv` package's, or PATH's)
    cache_dir: Path | None = None  # packages kept across builds (None: the installer's own)
    cache_budget_mb: float | None = None  # emptied past it (None: build_cache's default)
    bun: str | None = None  # KILN_BUN: Node bundles by Bun (default: `bun` on PATH, else npm)

    @classmethod
    def from_settings(cls, settings: BundleSettings) -> Toolchain:
        limit_mb = settings.bundle_max_unpacked_mb
        cache_dir = settings.build_cache_dir
        if cache_dir is None and settings.in_lambda:  # the builder's ephemeral storage
            cache_dir = temp_place("kiln-build-cache")  # checked: code is read from it
        return cls(
            npm=settings.npm,
            node_binary=settings.node_binary,
            pyenv_root=settings.pyenv_root,
            max_unpacked_bytes=int(limit_mb * 2**20) if limit_mb else DEFAULT_MAX_UNPACKED_BYTES,
            installer=settings.bundle_installer,
            uv=settings.uv,
            cache_dir=cache_dir,
            cache_budget_mb=settings.build_cache_mb,
            bun=settings.bun,
        )

    def python_installer(self) -> tuple[str, str | None]:
        """("uv", its path) or ("pip", None); a BuildError when uv is asked for and missing."""
        if self.installer == "pip":
            return "pip", None
        uv = find_uv(self.uv)
        if uv is None and self.installer == "uv":
            raise BuildError(
                "KILN_BUNDLE_INSTALLER=uv, but uv is not installed on the builder (pip install "
                "uv, or set KILN_UV to its binary)",
                "",
            )
        return ("uv", uv) if uv else ("pip", None)


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
    hand_over: HandOver | None = None,
) -> BuildOutput:
    """Build `record`'s bundle under `workdir`; raises BuildError with the log on failure.

    `hand_over` gets the installed contents before they are zipped (a builder in the serving
    process hands them to its bundle cache first: kiln.bundles.scheduler.run_build)."""
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
        installer = "uv pip" if tools.python_installer()[0] == "uv" else "pip"
        say(f"{installer} install {' '.join(record.requirements)} for {record.target}")
        lock, contents, compiled_by = _install_python(record, target, install_dir, workdir, log)
    else:
        installer = "bun" if find_bun(tools.bun) else "npm"
        say(f"{installer} install {' '.join(record.requirements)}")
        lock = _install_node(record, install_dir, log)
        contents, compiled_by = InstalledTree.of(install_dir), None
    zip_path = workdir / f"{record.id}.zip"
    try:
        _refuse_if_over(contents, limit, log)
        if hand_over is not None:
            handing = time.monotonic()
            hand_over(contents)
            took = time.monotonic() - handing
            log.add(f"# handed over after {handing - started:.2f} s, in {took:.2f} s")
        say(f"zipping {contents.count} files ({contents.unpacked / 2**20:.1f} MB)")
        zipping = time.monotonic()
        contents.write(zip_path)
        log.add(f"# zip: {time.monotonic() - zipping:.2f} s")
    finally:
        contents.close()
    duration = time.monotonic() - started
    manifest = _manifest(record, lock, contents, zip_path, compiled_by, duration)
    log.add(
        f"# done in {duration:.1f} s: {contents.count} files, {contents.unpacked} bytes unpacked"
    )
    return BuildOutput(zip_path=zip_path, manifest=manifest, log=log.text(), duration_s=duration)


def _refuse_if_over(contents: Contents, limit: int, log: _Log) -> None:
    """Raise BuildError when the installed packages are bigger than the bundle limit."""
    if contents.unpacked > limit:
        reason = (
            f"the installed packages take {contents.unpacked / 2**20:.1f} MB, over the bundle "
            f"limit of {limit / 2**20:.0f} MB (KILN_BUNDLE_MAX_UNPACKED_MB); use fewer or "
            "smaller packages"
        )
        log.add(f"# refused: {reason}")
        raise BuildError(reason, log.text())


def _manifest(
    record: BundleRecord,
    lock: list[dict[str, Any]],
    contents: Contents,
    zip_path: Path,
    compiled_by: str | None,
    duration: float,
) -> dict[str, Any]:
    """The bundle's manifest: what was asked for, what was installed and what was built."""
    return {
        "bundle_id": record.id,
        "language": record.language,
        "target": record.target,
        "requirements": list(record.requirements),
        "lock": lock,
        "file_count": contents.count,
        "unpacked_size": contents.unpacked,
        "zip_size": zip_path.stat().st_size,
        "zip_sha256": _sha256(zip_path),
        "bytecode_compiled_by": compiled_by,
        "duration_s": round(duration, 3),
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "builder": {"python": sys.version.split()[0], "platform": sys.platform},
    }


# -- Python ---------------------------------------------------------------------------------


def _install_python(
    record: BundleRecord, target: Target, install_dir: Path, workdir: Path, log: _Log
) -> tuple[list[dict[str, Any]], Contents, str | None]:
    local_version = f"{sys.version_info.major}.{sys.version_info.minor}"
    if not target.is_lambda and target.python_version != local_version:
        raise BuildError(
            f"target {record.target} needs Python {target.python_version}, but this builder "
            f"runs {local_version}; build a lambda-* target or run the builder on that Python",
            log.text(),
        )
    _, uv = log.tools.python_installer()
    if uv is None:
        lock = _pip_install(record, target, install_dir, workdir, log)
        compiled_by = _compile_python(target, install_dir, log)
        return lock, InstalledTree.of(install_dir), compiled_by
    target_args = ["--python", sys.executable]
    if target.is_lambda:
        machine = "x86_64" if target.arch == "x86_64" else "aarch64"
        target_args += [
            "--python-platform", f"{machine}-manylinux_2_28",
            "--python-version", str(target.python_version),
        ]  # fmt: skip
    cache = log.tools.cache_dir
    log.add(f"# installer: uv ({uv}), cache {cache or 'uv default'}")
    run = functools.partial(_run_in, log=log, cwd=workdir)
    # A cold build's one-process install goes beside its package folders (to be renamed).
    early = None if cache is None else cache / f".early-install-{uuid.uuid4().hex}"
    installer = Uv(
        uv, target_args=target_args, cache_dir=cache, workdir=workdir, run=run, early=early
    )
    try:
        return _install_by_uv(installer, record, target, install_dir, workdir, log)
    finally:
        installer.discard()


def _install_by_uv(
    installer: Uv,
    record: BundleRecord,
    target: Target,
    install_dir: Path,
    workdir: Path,
    log: _Log,
) -> tuple[list[dict[str, Any]], Contents, str | None]:
    cache = log.tools.cache_dir
    try:
        lock = installer.lock(list(record.requirements))
    except BuildError as error:
        if log.tools.installer != "auto":  # uv was asked for by name: its failure is the answer
            raise
        # uv reads no pip.conf: an index (or proxy) only pip knows of is out of its reach.
        log.add(f"# uv could not resolve ({error.reason}); building with pip instead")
        lock = _pip_install(record, target, install_dir, workdir, log)
        return lock, InstalledTree.of(install_dir), _compile_python(target, install_dir, log)
    interpreter = target_interpreter(target, log.tools.pyenv_root)
    if cache is not None:
        try:
            layers = build_layers(
                lock,
                root=cache / "packages",
                flavour=f"{record.target}|{_interpreter_version(interpreter)}",
                install=installer.install,
                compile_dirs=functools.partial(_compile_dirs, interpreter, log),
                write_zip=write_zip,
            )
        except UnsafeDirectoryError as error:  # its files would go into bundles as they are
            log.add(f"# refused: {error}")
            raise BuildError(str(error), log.text()) from error
        except LayerError as error:
            log.add(f"# package folders not used ({error}): installing the whole tree")
        else:
            if interpreter is None:
                log.add(f"# no Python {target.python_version} here: bytecode left to imports")
            return lock, LayeredContents(layers), interpreter
    installer.install(lock, install_dir)
    compiled_by = _compile_python(target, install_dir, log)
    return lock, InstalledTree.of(install_dir), compiled_by


@functools.cache
def _interpreter_version(interpreter: str | None) -> str:
    if interpreter is None:
        return "no-bytecode"
    probe = subprocess.run(
        [interpreter, "-c", "import sys; print(sys.version.split()[0])"],
        capture_output=True, text=True, check=False, timeout=30,
    )  # fmt: skip
    return probe.stdout.strip() or interpreter


def _compile_dirs(interpreter: str | None, log: _Log, folders: Iterable[Path]) -> None:
    """Bytecode for each folder, names relative to it (as `_compile_python` does). The
    compiler starts at once and takes each folder as it comes (the next package's files may
    still be moving into place meanwhile)."""
    if interpreter is None:
        for _ in folders:  # nothing to compile with: the folders are still made
            pass
        return
    try:
        _run_fed([interpreter, "-c", _COMPILE_DIRS], map(str, folders), log, what="compileall")
    except BuildError:
        log.add("# some files did not compile; they are left as source")


# One pool over the files of all folders (compileall's pool is per folder), each file named
# relative to its folder as `compileall -s` names them; `doraise` so a bad file is counted.
# The folders come on stdin, one a line, each compiled as soon as it is named.
_COMPILE_DIRS = """
import concurrent.futures, multiprocessing, os, py_compile, sys
MODE = py_compile.PycInvalidationMode.UNCHECKED_HASH
def one(job):
    try:
        py_compile.compile(job[0], dfile=job[1], doraise=True, invalidation_mode=MODE)
        return 0
    except (py_compile.PyCompileError, OSError, ValueError):
        return 1
def many(jobs):
    return sum(map(one, jobs))
if __name__ == "__main__":
    fork = multiprocessing.get_context("fork")  # `-c` has no module a spawned worker imports
    pool, waiting, futures = None, [], []
    for line in sys.stdin:
        d = line.rstrip("\\n")
        waiting += [(os.path.join(r, f), os.path.relpath(os.path.join(r, f), d))
                    for r, _, fs in os.walk(d) for f in fs if f.endswith(".py")]
        if pool is None and len(waiting) < 256:  # a package or two: no pool (it costs more)
            continue
        if pool is None:
            pool = concurrent.futures.ProcessPoolExecutor(mp_context=fork)
        futures += [pool.submit(many, waiting[i:i + 32]) for i in range(0, len(waiting), 32)]
        waiting = []
    failed = many(waiting) + sum(future.result() for future in futures)
    if pool is not None:
        pool.shutdown()
    sys.exit(1 if failed else 0)
"""


def _pip_install(
    record: BundleRecord, target: Target, install_dir: Path, workdir: Path, log: _Log
) -> list[dict[str, Any]]:
    log.add("# installer: pip")
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
    if log.tools.cache_dir is not None:
        command += ["--cache-dir", str(log.tools.cache_dir / "pip")]
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
    bun = find_bun(log.tools.bun)
    if bun is not None:
        log.add(f"# installer: bun ({bun})")
        run = functools.partial(_run_with, log=log, cwd=install_dir)
        return bun_install(bun, install_dir=install_dir, cache_dir=log.tools.cache_dir, run=run)
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


def _run_in(command: list[str], what: str, *, log: _Log, cwd: Path) -> None:
    _run(command, log, what=what, cwd=cwd)


def _run_with(
    command: list[str], what: str, extra: dict[str, str], *, log: _Log, cwd: Path
) -> None:
    _run(command, log, what=what, cwd=cwd, extra=extra)


def _run(
    command: list[str], log: _Log, *, what: str, cwd: Path, extra: dict[str, str] | None = None
) -> None:
    log.add("$ " + " ".join(command))
    started = time.monotonic()
    try:
        completed = subprocess.run(
            command,
            cwd=cwd,
            env=_environment(log, extra),
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
    _ended(log, what, started, completed.returncode, completed.stdout)


def _run_fed(command: list[str], lines: Iterable[str], log: _Log, *, what: str) -> None:
    """`_run`, `lines` fed to its stdin as they are made (its output is read after: little)."""
    log.add("$ " + " ".join(command[:2]) + " <script> < (folders as they are made)")
    started = time.monotonic()
    child = subprocess.Popen(
        command, env=_environment(log, None), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        assert child.stdin is not None
        for line in lines:
            child.stdin.write(line.encode() + b"\n")
            child.stdin.flush()
        output, _ = child.communicate(timeout=INSTALL_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        raise BuildError(
            f"{what} did not finish within {INSTALL_TIMEOUT_S:.0f} s", log.text()
        ) from exc
    finally:
        if child.poll() is None:  # the lines' maker failed, or the time ran out
            child.kill()
            child.communicate()
    _ended(log, what, started, child.returncode, output)


def _environment(log: _Log, extra: dict[str, str] | None) -> dict[str, str]:
    env = inherited_environment(PIP_NO_INPUT="1", PYTHONDONTWRITEBYTECODE="1", **(extra or {}))
    node = log.tools.node_binary
    if node:  # npm runs `node` from PATH
        env["PATH"] = f"{Path(node).parent}{os.pathsep}{env.get('PATH', '')}"
    if not os.access(Path.home(), os.W_OK):  # Lambda: only /tmp is writable
        scratch_home = temp_place("kiln-build-home")  # pip reads its settings from here
        env["HOME"] = str(scratch_home)
        env.setdefault("PIP_CACHE_DIR", str(scratch_home / "pip-cache"))
        env.setdefault("npm_config_cache", str(scratch_home / "npm-cache"))
    return env


def _ended(log: _Log, what: str, started: float, returncode: int, stdout: bytes) -> None:
    output = stdout.decode("utf-8", "replace")
    log.add(output)
    log.add(f"# {what}: {time.monotonic() - started:.2f} s")
    if returncode != 0:
        raise BuildError(f"{what} failed (exit {returncode}): {_last_error(output)}", log.text())


def _last_error(output: str) -> str:
    """The line of a tool's output that says what went wrong, for the record's `error`."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    for number, line in enumerate(lines):
        if line.startswith(("ERROR:", "npm error", "npm ERR!", "error:")):
            causes = [c for c in lines[number + 1 : number + 3] if c.startswith("cause:")]
            return " ".join([line, *causes])[:500]
        if line.startswith(_UV_SUMMARY):  # uv: the summary, then the reason on the next line
            reason = lines[number + 1].lstrip(_UV_REASON) if number + 1 < len(lines) else ""
            return f"{line.lstrip(_UV_SUMMARY)} {reason}".strip()[:500]
    return lines[-1][:500] if lines else "no output"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1024 * 1024), b""):
            digest.update(chunk)
    return digest.hexdigest()
