"""The studio shipped in the package is the build of the committed sources, and its TypeScript
unit tests pass: `npm ci` + `vite build` in a scratch copy, file by file the same bytes."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

STUDIO = Path(__file__).resolve().parents[3] / "functions" / "kiln" / "studio"
WEB = STUDIO / "web"
DIST = STUDIO / "dist"

pytestmark = pytest.mark.slow


def digests(folder: Path) -> dict[str, str]:
    return {
        path.relative_to(folder).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def npm(*args: str, cwd: Path, env: dict[str, str] | None = None) -> str:
    npm_path = shutil.which("npm")
    assert npm_path, "npm is needed to rebuild the studio (it comes with Node.js)"
    done = subprocess.run(
        [npm_path, *args], cwd=cwd, capture_output=True, text=True, timeout=600, env=env
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


@pytest.fixture(scope="module")
def web_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The committed sources (no node_modules, no build) with `npm ci` done."""
    copy = tmp_path_factory.mktemp("studio") / "web"
    shutil.copytree(WEB, copy, ignore=shutil.ignore_patterns("node_modules"))
    npm("ci", "--ignore-scripts", "--no-audit", "--no-fund", cwd=copy)
    return copy


def test_shipped_studio_assets_are_the_build_of_the_committed_sources(web_copy: Path) -> None:
    out = web_copy.parent / "out"
    npm("run", "build", cwd=web_copy, env={**os.environ, "KILN_STUDIO_OUT": str(out)})
    assert digests(DIST), "functions/kiln/studio/dist is empty: run `npm run build` in web/"
    assert digests(out) == digests(DIST), (
        "functions/kiln/studio/dist differs from a build of web/: "
        "run `npm ci && npm run build` in functions/kiln/studio/web and commit dist/"
    )


def test_studio_typescript_unit_tests_pass(web_copy: Path) -> None:
    output = npm("test", cwd=web_copy)
    assert "passed" in output
