"""A bundle's identity: what it is built for, and the hash that names it.

Targets name where a bundle's files will be imported:

| target                      | who uses it                                     |
| --------------------------- | ----------------------------------------------- |
| `local-python3.11-x86_64`   | `kiln dev` on this machine (its own interpreter) |
| `lambda-python3.13-x86_64`  | the Lambda functions (manylinux wheels only)     |
| `lambda-python3.13-arm64`   | the same on Graviton                             |
| `node24-x86_64`             | Node tools (pure-JS packages, install scripts off) |

The Python target in force comes from `KILN_BUNDLE_TARGET`; without it, inside Lambda the
function's runtime (`lambda-python<its version>-<its arch>`), elsewhere the interpreter's own
`local-…` target. The Node target comes from `KILN_NODE_BUNDLE_TARGET`, else the major
version of the Node.js that runs tools (`KILN_NODE_BINARY` or `node` on PATH).
"""

from __future__ import annotations

import functools
import hashlib
import json
import platform
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kiln.catalog.violations import RuleError

if TYPE_CHECKING:
    from kiln.catalog.model import Language  # a name for the checker: the runner loads no model

LANGUAGES = ("python", "node")

# Bump when the build recipe changes in a way that changes a bundle's files for the same
# requirements; old bundles then stay untouched and new ids are built.
RECIPE_VERSION = 1

_TARGET_RE = re.compile(
    r"^(?:(?P<kind>local|lambda)-python(?P<py>3\.\d{1,2})|node(?P<node>\d{2}))-(?P<arch>x86_64|arm64)$"
)


class RequirementError(ValueError):
    """A requirement or target that a bundle cannot be built from."""


@dataclass(frozen=True)
class Target:
    """A parsed target name."""

    name: str
    language: str  # "python" | "node"
    kind: str  # "local" | "lambda" | "node"
    arch: str  # "x86_64" | "arm64"
    python_version: str | None = None  # "3.13" for Python targets
    node_major: int | None = None

    @property
    def is_lambda(self) -> bool:
        return self.kind == "lambda"

    @property
    def manylinux_platforms(self) -> tuple[str, ...]:
        """pip `--platform` tags for a Lambda target (Amazon Linux 2023: glibc 2.34)."""
        machine = "x86_64" if self.arch == "x86_64" else "aarch64"
        return (f"manylinux2014_{machine}", f"manylinux_2_28_{machine}")


def parse_target(name: str) -> Target:
    """Parse a target name; raises RequirementError naming the accepted forms."""
    match = _TARGET_RE.match(name)
    if match is None:
        raise RequirementError(
            f"bundle target {name!r} is not one Kiln knows: use local-python3.X-ARCH, "
            "lambda-python3.X-ARCH or nodeNN-ARCH, with ARCH x86_64 or arm64 "
            "(for example lambda-python3.13-x86_64)"
        )
    arch = match["arch"]
    if match["node"]:
        return Target(name, "node", "node", arch, node_major=int(match["node"]))
    return Target(name, "python", match["kind"], arch, python_version=match["py"])


def machine_arch() -> str:
    machine = platform.machine().lower()
    return "arm64" if machine in ("aarch64", "arm64") else "x86_64"


def default_target(
    language: str,
    *,
    configured: str | None = None,
    in_lambda: bool = False,
    node_binary: str | None = None,
) -> str:
    """The target bundles are built for and fetched by in this process.

    `configured` is KILN_BUNDLE_TARGET (Python) or KILN_NODE_BUNDLE_TARGET (Node); without
    it, inside Lambda the function's own runtime, elsewhere this interpreter / this Node.
    """
    if language not in LANGUAGES:
        raise RequirementError(f"language must be one of {', '.join(LANGUAGES)}")
    if configured:
        parse_target(configured)
        return configured
    if language == "python":
        kind = "lambda" if in_lambda else "local"
        version = f"{sys.version_info.major}.{sys.version_info.minor}"
        return f"{kind}-python{version}-{machine_arch()}"
    return f"node{node_major(node_binary)}-{machine_arch()}"


@functools.cache
def node_major(node_binary: str | None = None) -> int:
    """The major version of the Node.js that runs tools here (KILN_NODE_BINARY or PATH)."""
    node = node_binary or shutil.which("node")
    if node:
        try:
            version = subprocess.run(
                [node, "--version"], capture_output=True, text=True, timeout=10, check=False
            ).stdout
            match = re.match(r"v(\d+)\.", version.strip())
            if match:
                return int(match[1])
        except OSError:
            pass
    return 20


def normalise_requirement(language: str, requirement: str) -> str:
    """One requirement in canonical form, so that spelling never changes a bundle's id.

    What is accepted is decided by the catalog's rule set (`catalog.requirements`), the same
    one a tool's save applies; only the canonical spelling is this module's.
    """
    if language not in LANGUAGES:
        raise RequirementError(f"language must be one of {', '.join(LANGUAGES)}")
    # Imported here: the public function loads this module but never normalises (packaging).
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    from kiln.catalog.requirements import check_requirement

    checked: Language = "python" if language == "python" else "node"
    try:
        _, text = check_requirement(checked, requirement)
    except RuleError as error:
        raise RequirementError(str(error)) from None
    if checked == "node":
        name, spec = split_node_requirement(text)
        return f"{name}@{spec}" if spec else name
    parsed = Requirement(text)
    extras = (
        f"[{','.join(sorted(canonicalize_name(e) for e in parsed.extras))}]"
        if parsed.extras
        else ""
    )
    specs = ",".join(sorted(str(s) for s in parsed.specifier))
    marker = f"; {parsed.marker}" if parsed.marker else ""
    return f"{canonicalize_name(parsed.name)}{extras}{specs}{marker}"


def split_node_requirement(text: str) -> tuple[str, str]:
    """`lodash@4.17.21` -> ("lodash", "4.17.21"); `@scope/pkg@^1` -> ("@scope/pkg", "^1").

    `text` is a requirement the rules accepted (as every saved one is).
    """
    at = text.find("@", 1)
    return (text[:at], text[at + 1 :]) if at > 0 else (text, "")


def normalise_requirements(language: str, requirements: Sequence[str]) -> tuple[str, ...]:
    """Sorted, de-duplicated canonical requirements."""
    return tuple(sorted({normalise_requirement(language, r) for r in requirements}))


def bundle_id(language: str, target: str, requirements: Sequence[str]) -> str | None:
    """The content-address of a bundle; None when there is nothing to install."""
    normalised = normalise_requirements(language, requirements)
    if not normalised:
        return None
    parsed = parse_target(target)
    if parsed.language != language:
        raise RequirementError(f"bundle target {target!r} is not a {language} target")
    canonical = json.dumps(
        {
            "recipe": RECIPE_VERSION,
            "language": language,
            "target": target,
            "requirements": normalised,
        },
        sort_keys=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(canonical.encode()).hexdigest()[:32]
