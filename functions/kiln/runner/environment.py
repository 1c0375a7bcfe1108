"""The environment a script gets: an allow-list, never a copy of the server's."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from kiln.runner.model import Language

SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"


def script_environment(
    language: Language, run_dir: Path, interpreter: Path, bundle_path: Path | None
) -> dict[str, str]:
    """What the runner sets in a run's environment (known before the call: see `standby.py`)."""
    env: dict[str, str] = {}
    env.update(
        PATH=f"{interpreter.parent}:{SAFE_PATH}",
        LANG="C.UTF-8",
        LC_ALL="C.UTF-8",
        HOME=str(run_dir),
        TMPDIR=str(run_dir),
        PYTHONDONTWRITEBYTECODE="1",
        PYTHONUNBUFFERED="1",
        PYTHONIOENCODING="utf-8",
    )
    if bundle_path is not None:
        if language == "python":
            env["PYTHONPATH"] = str(bundle_path)
        else:
            env["NODE_PATH"] = str(bundle_path / "node_modules")
    return env


def tool_settings(extra_env: Mapping[str, str], env: Mapping[str, str]) -> dict[str, str]:
    """The tool's own settings and secrets for a run whose environment is `env`.

    They reach the script through a private pipe, never an exec'd environment block, and can
    never replace what the runner sets: PATH, HOME, the bundle paths and the locale stay the
    runner's.
    """
    for name, value in extra_env.items():
        if not name or "=" in name or "\0" in name or "\0" in value:
            raise ValueError(f"extra_env name {name!r} is not a valid environment variable")
    return {name: value for name, value in extra_env.items() if name not in env}
