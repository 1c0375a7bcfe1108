"""What the bundles room reads of the configuration. Built by `kiln.settings` from the
environment (`Settings.bundles`), passed in by `kiln.stack`; the variables are named there."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class BundleSettings:
    """Where bundles are kept, who builds them, and what a build here uses."""

    table: str = "kiln"  # records (DynamoDB)
    bucket: str = "kiln-local"  # files (S3)
    region: str | None = None  # the builder function's region
    builder_function: str | None = None  # builds by asynchronous invoke; None: here
    in_lambda: bool = False  # inside Lambda nothing builds without a builder function
    bundle_target: str | None = None  # Python bundles' target (default: this machine's)
    node_bundle_target: str | None = None
    node_binary: str | None = None  # runs Node tools; npm is looked for beside it
    bundle_cache_dir: Path | None = None  # unpacked bundles
    bundle_cache_mb: float | None = None  # their disk budget
    # What a build uses (kiln.bundles.build.Toolchain):
    npm: str | None = None
    pyenv_root: str | None = None  # where builds look for other Pythons
    bundle_max_unpacked_mb: float | None = None
    bundle_installer: str = "auto"  # uv, pip, or auto (uv if installed)
    uv: str | None = None
    bun: str | None = None
    build_cache_dir: Path | None = None  # packages kept across builds
    build_cache_mb: float | None = None  # their disk budget (kiln.bundles.build_cache)
