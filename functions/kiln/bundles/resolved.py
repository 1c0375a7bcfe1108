"""What a bundle resolved to: the exact packages a build installed, and one digest of them.

A requirement names a range (`humanize==4.*`); a build turns it into exact versions, so two
builds of one bundle id (another deployment, or a rebuild after its zip was lost) may install
different packages. `entries` writes the lock a build made (`build.py`'s manifest) as sorted
lines, one per package, `name==version --hash=sha256:<hex>` as pip's hash-checking mode
writes them (npm's integrity, `sha512-…`, for a Node package; no hash when the installer
gave none), and `digest` is the SHA-256 of those lines. Names are PEP 503 normalised for
Python and kept as npm wrote them for Node, so the same resolution is the same digest on
every machine, in every process, whatever order the installer listed it in; any other
version or wheel is another digest. The bundle's record keeps both (`BundleRecord.resolved`,
`resolved_sha256`, set when it turns ready), and the fingerprint of a revision with
packages takes the digest (catalog/fingerprint.py).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

PREFIX = "sha256:"


def entries(language: str, lock: Iterable[Mapping[str, Any]]) -> tuple[str, ...]:
    """The lock as sorted `name==version --hash=…` lines."""
    from packaging.utils import canonicalize_name  # a build's end, never a cold start's path

    lines = []
    for package in lock:
        name = str(package.get("name") or "")
        if language == "python":
            name = str(canonicalize_name(name))
        line = f"{name}=={package.get('version') or ''}"
        if package.get("sha256"):
            line += f" --hash=sha256:{package['sha256']}"
        elif package.get("integrity"):
            line += f" --hash={package['integrity']}"
        lines.append(line)
    return tuple(sorted(lines))


def digest(lines: Iterable[str]) -> str:
    """`sha256:<hex>` over the lines, each ended by a newline."""
    return PREFIX + hashlib.sha256("".join(f"{line}\n" for line in lines).encode()).hexdigest()


def described(language: str, lock: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """A bundle record's `resolved` and `resolved_sha256` for the lock a build made."""
    lines = entries(language, lock)
    return {"resolved": list(lines), "resolved_sha256": digest(lines)}
